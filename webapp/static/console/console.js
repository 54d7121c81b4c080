// The console's small behaviours: the CSRF token on every htmx request, errors shown
// where the answer would go, and the review queue's keyboard shortcuts. Everything
// works without this file too (plain forms); it only saves page loads.
(function () {
  "use strict";

  document.addEventListener("htmx:configRequest", function (evt) {
    var token = document.body.dataset.csrf;
    if (token) evt.detail.headers["X-CSRF-Token"] = token;
  });

  // A refusal (4xx/5xx) is a fragment naming the API's error: show it in the nearest
  // result area instead of replacing what the form was about.
  document.addEventListener("htmx:beforeSwap", function (evt) {
    if (evt.detail.xhr.status < 400) return;
    var scope = evt.detail.elt.closest("[data-card], [data-result-scope]");
    var target = scope && scope.querySelector(".result");
    if (!target) target = document.getElementById("flash");
    if (!target) return;
    evt.detail.shouldSwap = true;
    evt.detail.isError = false;
    evt.detail.target = target;
    evt.detail.swapOverride = "innerHTML";
  });

  function typing(el) {
    return el && (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT" || el.isContentEditable);
  }

  function cards() { return Array.prototype.slice.call(document.querySelectorAll("[data-queue] [data-card]")); }

  function current() {
    var active = document.activeElement;
    return active && active.closest ? active.closest("[data-queue] [data-card]") : null;
  }

  function move(step) {
    var all = cards();
    if (!all.length) return;
    var at = all.indexOf(current());
    var next = all[Math.max(0, Math.min(all.length - 1, at < 0 ? 0 : at + step))];
    next.focus();
    next.scrollIntoView({block: "nearest"});
  }

  document.addEventListener("keydown", function (evt) {
    if (evt.ctrlKey || evt.metaKey || evt.altKey || typing(evt.target)) return;
    if (!document.querySelector("[data-queue]")) return;
    var card = current();
    if (evt.key === "j") { move(1); evt.preventDefault(); }
    else if (evt.key === "k") { move(-1); evt.preventDefault(); }
    else if (card && evt.key === "a") {
      var approve = card.querySelector("[data-approve]");
      if (approve) { approve.click(); evt.preventDefault(); }
    } else if (card && evt.key === "r") {
      var reason = card.querySelector("[data-reject-reason]");
      if (reason) { reason.focus(); evt.preventDefault(); }
    } else if (card && evt.key === "e") {
      var edit = card.querySelector("[data-edit]");
      if (edit) { edit.open = true; edit.querySelector("textarea").focus(); evt.preventDefault(); }
    }
  });

  // After a card is swapped (approved, edited, ...), keep the keyboard where it was.
  document.addEventListener("htmx:afterSwap", function (evt) {
    var id = evt.detail.target && evt.detail.target.id;
    var card = id && document.getElementById(id);
    if (card && card.matches("[data-card]")) card.focus();
  });
})();
