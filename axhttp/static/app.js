// AX dashboard: small progressive enhancements; every page works without them.
(function () {
  "use strict";
  // Ask before destructive changes (forms and buttons with data-confirm).
  document.addEventListener("submit", function (ev) {
    var btn = ev.submitter;
    var msg = (btn && btn.getAttribute("data-confirm")) || ev.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) {
      ev.preventDefault();
    }
  });
  // "Select all" on the dead letters page.
  document.addEventListener("change", function (ev) {
    if (ev.target.id !== "select-all") {
      return;
    }
    var boxes = document.querySelectorAll('#dead-list input[name="id"]');
    for (var i = 0; i < boxes.length; i++) {
      boxes[i].checked = ev.target.checked;
    }
  });

  // Relative times ("3 min ago") beside the absolute ones, kept current.
  function rel(ms) {
    var future = ms < 0, s = Math.abs(ms) / 1000, out;
    if (s < 10) {
      return "just now";
    } else if (s < 60) {
      out = Math.floor(s) + " s";
    } else if (s < 3600) {
      out = Math.floor(s / 60) + " min";
    } else if (s < 48 * 3600) {
      out = Math.floor(s / 3600) + " h";
    } else {
      out = Math.floor(s / 86400) + " d";
    }
    return future ? "in " + out : out + " ago";
  }
  function ages() {
    var spans = document.querySelectorAll("time[datetime] + .ago");
    for (var i = 0; i < spans.length; i++) {
      var t = Date.parse(spans[i].previousElementSibling.getAttribute("datetime"));
      if (!isNaN(t)) {
        spans[i].textContent = rel(Date.now() - t);
      }
    }
  }
  window.setInterval(ages, 15000);

  // Live pages: #content[data-refresh] is fetched again every so many
  // milliseconds and swapped in, unless the tab is hidden, the operator
  // is typing or has ticked a box, or paused it. The refresh renews no
  // session (X-AX-Refresh); a page that now needs a login reloads.
  var content = document.getElementById("content");
  var every = content && parseInt(content.getAttribute("data-refresh"), 10);
  if (!every) {
    return;
  }
  var status = document.getElementById("live-status");
  var toggle = document.getElementById("live-toggle");
  var paused = window.localStorage && localStorage.getItem("ax-live") === "off";
  function show() {
    if (status) {
      status.textContent = paused ? "paused" : "live";
    }
    if (toggle) {
      toggle.textContent = paused ? "resume" : "pause";
    }
  }
  show();
  if (toggle) {
    toggle.addEventListener("click", function () {
      paused = !paused;
      if (window.localStorage) {
        localStorage.setItem("ax-live", paused ? "off" : "on");
      }
      show();
    });
  }
  function busy() {
    var a = document.activeElement;
    if (a && content.contains(a) && (/^(SELECT|TEXTAREA)$/.test(a.tagName) ||
        (a.tagName === "INPUT" && !/^(checkbox|radio|submit|button|hidden)$/.test(a.type)))) {
      return true;
    }
    return content.querySelector('input[type="checkbox"]:checked') !== null;
  }
  var inFlight = false;
  function refresh() {
    if (paused || inFlight || document.hidden || busy()) {
      return;
    }
    inFlight = true;
    fetch(location.href, { headers: { "X-AX-Refresh": "1" }, credentials: "same-origin" })
      .then(function (res) {
        if (res.redirected && /\/login$/.test(new URL(res.url).pathname)) {
          location.reload();
          return null;
        }
        return res.ok ? res.text() : null;
      })
      .then(function (html) {
        if (!html || busy()) {
          return;
        }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("content");
        if (!fresh) {
          return;
        }
        content.innerHTML = fresh.innerHTML;
        var rendered = doc.getElementById("rendered");
        var mine = document.getElementById("rendered");
        if (rendered && mine) {
          mine.innerHTML = rendered.innerHTML;
        }
        document.documentElement.setAttribute("data-refreshed", String(Date.now()));
        ages();
      })
      .catch(function () {})
      .then(function () {
        inFlight = false;
      });
  }
  window.setInterval(refresh, every);
})();
