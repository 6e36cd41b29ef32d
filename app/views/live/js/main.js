// The component's entry point (Streamlit components v2, no iframe): one keyed instance per view.
//
// Python sends each instance only the steps it has not sent recently (a small overlap guards
// against a render React skipped); `data.kind` says which view it feeds. Views live in the
// player on `window`, keyed by instance, so a re-mounted element redraws from memory and a
// re-sent step is ignored.

const VIEW_KINDS = {
  controls: (data) => new ControlsView(data.instance),
  chart: (data) => new ChartView(data.instance, data.chart),
};

// Our CSS goes into the page head, not a shadow root: Plotly puts its own styles in
// document.head and must see its elements (live_component.py prepends PD_CSS).
function installStyles() {
  if (typeof PD_CSS !== "string" || document.getElementById("pd-live-css")) return;
  const style = document.createElement("style");
  style.id = "pd-live-css";
  style.textContent = PD_CSS;
  document.head.appendChild(style);
}

export default function (component) {
  const { data, parentElement } = component;
  if (!data) return;
  installStyles();
  installBlankWatchdog();
  const p = player();
  const id = data.instance;
  let view = p.views.get(id);
  if (!view) {
    const make = VIEW_KINDS[data.kind];
    if (!make) {
      parentElement.textContent = "Unknown live view kind: " + data.kind;
      return;
    }
    view = p.attach(id, make(data));
  }
  if (isStaleSend(view, data)) return;  // its element is left empty: Streamlit removes it
  view.trigger = component.setTriggerValue;
  view.mount(parentElement);
  view.receive(data);
}
