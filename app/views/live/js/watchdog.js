// The blank-page watchdog.
//
// Under heavy load Streamlit's page can, rarely, unmount its whole app after a render error and
// leave the reader a white page. This script lives in the page's own window, so its
// timer outlives the app: when the app has been gone for BLANK_AFTER_MS it reloads the page,
// at most once every BLANK_RELOAD_EVERY_MS (so a page that fails at once does not loop). The
// address bar holds the prompt and settings (app/views/live/link.py), so the reload keeps
// them, and the `recovered` key it adds makes the page say what happened.

const BLANK_AFTER_MS = 3000;
const BLANK_RELOAD_EVERY_MS = 60000;
const BLANK_KEY = "pdBlankReloadAt"; // sessionStorage: when this tab last reloaded a blank page

function installBlankWatchdog() {
  const lab = pdLab();
  if (lab.installed.watchdog) return;
  lab.installed.watchdog = true;
  let goneSince = null;
  setInterval(() => {
    if (document.querySelector('[data-testid="stApp"]')) { goneSince = null; return; }
    const now = Date.now();
    if (goneSince === null) goneSince = now;
    if (now - goneSince < BLANK_AFTER_MS) return;
    try {
      if (now - Number(window.sessionStorage.getItem(BLANK_KEY) || 0) < BLANK_RELOAD_EVERY_MS) {
        lab.watchdogHeld = now; // gone long enough, but reloaded within the minute: held (tests read it)
        return;
      }
      window.sessionStorage.setItem(BLANK_KEY, String(now));
    } catch (e) { return; } // no storage to remember the last reload: never reload, never loop
    const url = new URL(window.location.href);
    url.searchParams.set("recovered", "1");
    window.location.replace(url.toString());
  }, 500);
}
