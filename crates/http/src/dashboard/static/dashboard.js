// sendonce dashboard: live numbers. Every element carrying data-live="URL" (a campaign's
// progress.json) is refreshed every 2 s: inside it, the elements marked data-count="STATE",
// data-total, data-status and the <progress data-progress> bar get the new numbers. Polling
// stops once the campaign is settled. Every page is complete without this script.
(function () {
  "use strict";
  function set(root, selector, value) {
    root.querySelectorAll(selector).forEach(function (el) {
      el.textContent = String(value);
    });
  }
  function apply(root, p) {
    Object.keys(p.counts || {}).forEach(function (state) {
      set(root, '[data-count="' + state + '"]', p.counts[state]);
    });
    set(root, "[data-total]", p.total);
    set(root, "[data-status]", p.status);
    root.querySelectorAll("progress[data-progress]").forEach(function (bar) {
      bar.max = Math.max(p.total, 1);
      bar.value = p.done;
    });
  }
  function watch(root) {
    var url = root.getAttribute("data-live");
    function tick() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) {
          return r.ok ? r.json() : null;
        })
        .then(function (p) {
          if (!p) {
            return;
          }
          apply(root, p);
          if (!p.settled) {
            window.setTimeout(tick, 2000);
          }
        })
        .catch(function () {
          window.setTimeout(tick, 2000);
        });
    }
    window.setTimeout(tick, 2000);
  }
  document.querySelectorAll("[data-live]").forEach(watch);
})();
