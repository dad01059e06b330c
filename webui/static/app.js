// Orrery web UI: times in the viewer's zone, copy buttons, live run pages.
// Pages work without it.
(function () {
  "use strict";

  // Times: the server writes UTC; show them in the viewer's zone, UTC on hover.
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      if (el.dataset.local) return;
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) return;
      el.dataset.local = "1";
      el.textContent = d.toLocaleString(undefined, {
        year: "numeric", month: "2-digit", day: "2-digit",
        hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"
      });
    });
  }

  // Copy-as-CLI buttons.
  document.addEventListener("click", function (e) {
    var b = e.target.closest("button[data-copy]");
    if (!b) return;
    var text = b.getAttribute("data-copy");
    if (navigator.clipboard) {
      navigator.clipboard.writeText(text).then(function () { b.textContent = "copied"; });
    }
  });

  // Live run page: server-sent events (resumed by Last-Event-ID by the
  // browser itself), or polling when EventSource fails.
  function applyState(state) {
    Object.keys(state.tasks || {}).forEach(function (id) {
      var st = state.tasks[id];
      document.querySelectorAll('[data-id="' + id + '"]').forEach(function (el) {
        if (el.classList.contains("node")) {
          el.setAttribute("data-status", st);
          var t = el.querySelector("title");
          if (t) t.textContent = el.getAttribute("data-task") + ": " + st;
        } else {
          var cell = el.querySelector(".task-status");
          if (cell) {
            cell.setAttribute("data-status", st);
            cell.innerHTML = "";
            var span = document.createElement("span");
            span.className = "badge st-" + st;
            span.textContent = st;
            cell.appendChild(span);
          }
        }
      });
    });
    if (state.run) {
      var rs = document.getElementById("run-status");
      if (rs && rs.getAttribute("data-status") !== state.run) {
        rs.setAttribute("data-status", state.run);
        rs.innerHTML = "";
        var span = document.createElement("span");
        span.className = "badge st-" + state.run;
        span.textContent = state.run;
        rs.appendChild(span);
      }
    }
  }

  // A finished run offers nothing to cancel.
  function finished() {
    document.querySelectorAll('button[data-action="cancel"]').forEach(function (b) { b.closest("form").remove(); });
  }

  function live() {
    var g = document.getElementById("graph");
    if (!g || g.getAttribute("data-finished") === "true") return;
    var run = g.getAttribute("data-run");
    var badge = document.getElementById("live");
    var polling = null;
    function poll() {
      if (polling) return;
      polling = setInterval(function () {
        fetch("/runs/" + run + "/status", { credentials: "same-origin" })
          .then(function (r) { return r.ok ? r.json() : null; })
          .then(function (s) {
            if (!s) return;
            applyState(s);
            if (s.finished) { clearInterval(polling); if (badge) badge.hidden = true; finished(); }
          });
      }, 1000);
    }
    if (!window.EventSource) { poll(); return; }
    var es = new EventSource("/runs/" + run + "/events");
    var failures = 0;
    es.onopen = function () { failures = 0; if (badge) badge.hidden = false; };
    es.onmessage = function (e) {
      var s = JSON.parse(e.data);
      applyState(s);
      if (s.finished) { es.close(); if (badge) badge.hidden = true; finished(); }
    };
    es.addEventListener("end", function () { es.close(); if (badge) badge.hidden = true; finished(); });
    es.onerror = function () {
      failures++;
      if (failures > 3) { es.close(); poll(); }
    };
  }

  function init() {
    localTimes(document);
    live();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
  document.addEventListener("htmx:afterSwap", function (e) { localTimes(e.target); });
})();
