// Plotly, loaded once per page; step patches applied to a figure; the theme's colours.
//
// plotly.min.js is a static file (app/static/, `[server] enableStaticServing`), not inlined in this
// component's script, so the browser caches it and every evaluation of this module shares it.

function plotlySrc() {
  const dir = window.location.pathname.replace(/\/[^/]*$/, "/");
  return dir + "app/static/plotly.min.js";
}

function loadPlotly() {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  const lab = pdLab();
  if (!lab.plotlyPromise) {
    lab.plotlyPromise = new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = plotlySrc();
      s.async = true;
      s.onload = () => resolve(window.Plotly);
      s.onerror = () => {
        lab.plotlyPromise = null; // a later draw tries again
        reject(new Error("could not load " + s.src));
      };
      document.head.appendChild(s);
    });
  }
  return lab.plotlyPromise;
}

// ---- figure patches (mirror of app/views/live/patches.py apply_patch) ---------------------
function setPath(target, path, value) {
  const keys = path.split(".");
  for (const k of keys.slice(0, -1)) {
    if (typeof target[k] !== "object" || target[k] === null) target[k] = {};
    target = target[k];
  }
  target[keys[keys.length - 1]] = value;
}

function applyPatch(fig, patch) {
  for (const [idx, arrays] of Object.entries(patch.append || {})) {
    const trace = fig.data[Number(idx)];
    for (const [key, values] of Object.entries(arrays)) trace[key] = (trace[key] || []).concat(values);
  }
  for (const [idx, arrays] of Object.entries(patch.cols || {})) {
    const trace = fig.data[Number(idx)];
    for (const [key, values] of Object.entries(arrays)) {
      if (key === "z" || key === "customdata" || key === "text") {
        const rows = trace[key] || values.map(() => []);
        trace[key] = rows.map((row, i) => row.concat(values[i]));
      } else {
        trace[key] = (trace[key] || []).concat(values);
      }
    }
  }
  for (const [path, value] of Object.entries(patch.layout || {})) setPath(fig.layout, path, value);
}

// Points a figure plots (a heatmap cell counts one), mirror of patches.py point_count.
function pointCount(fig) {
  let n = 0;
  for (const t of fig.data) {
    if (t.z) for (const row of t.z) n += row.length;
    else n += (t.y || []).length;
  }
  return n;
}

function themeColors(el) {
  // getComputedStyle forces a style recalculation; read it at most once a second (the theme
  // rarely changes), not on every redraw of every chart.
  const now = performance.now();
  const lab = pdLab();
  const cache = lab.theme;
  if (cache && now - cache.t < 1000) return cache.colors;
  const css = getComputedStyle(el);
  const text = (css.getPropertyValue("--st-text-color") || "").trim() || css.color || "#31333F";
  const colors = { text: text, grid: "rgba(128,128,128,0.25)" };
  lab.theme = { t: now, colors: colors };
  return colors;
}
