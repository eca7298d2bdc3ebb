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
})();
