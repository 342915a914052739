// Accessible names for what the theme and the saved widgets leave nameless. Runs once
// the page has loaded, and again whenever the widget manager renders something.
(function () {
  function text(el) {
    return (el && el.textContent ? el.textContent : "").replace(/\s+/g, " ").trim();
  }
  function fix(root) {
    // The theme's search buttons: the accessible name must contain the visible words.
    root.querySelectorAll("button.search-button__button[aria-label]").forEach(function (b) {
      var shown = text(b);
      if (shown) { b.setAttribute("aria-label", shown); }
    });
    // Icons inside a button that has its own name are decoration (the colour-mode
    // button's sun and moon would otherwise have to be part of its name).
    root.querySelectorAll("button[aria-label] svg").forEach(function (svg) {
      svg.setAttribute("aria-hidden", "true");
      svg.removeAttribute("aria-labelledby");
      svg.querySelectorAll("title").forEach(function (t) { t.remove(); });
    });
    // A folded code cell's toggle says "Show code cell source": let that be its name.
    root.querySelectorAll("summary[aria-label]").forEach(function (s) {
      if (text(s)) { s.removeAttribute("aria-label"); }
    });
    // The sidebar's expand toggles are empty <summary> elements.
    root.querySelectorAll("details > summary").forEach(function (s) {
      if (!text(s) && !s.getAttribute("aria-label")) {
        var link = s.parentElement && s.parentElement.parentElement ?
          s.parentElement.parentElement.querySelector(":scope > a") : null;
        s.setAttribute("aria-label", "Show the sections of " + (text(link) || "this page"));
      }
    });
    // The primary sidebar (the book's title and its contents) as a landmark of its own.
    root.querySelectorAll(".bd-sidebar-primary:not([role])").forEach(function (side) {
      side.setAttribute("role", "complementary");
      side.setAttribute("aria-label", "The book's contents");
    });
    // Slider handles (noUiSlider) carry no name: give them the slider's label.
    root.querySelectorAll(".widget-slider, .jupyter-widget-slider").forEach(function (w) {
      var label = text(w.querySelector(".widget-label, label"));
      w.querySelectorAll("[role=slider]").forEach(function (h) {
        if (!h.getAttribute("aria-label")) { h.setAttribute("aria-label", label || "slider"); }
      });
    });
    // A row of widget controls too wide for the column scrolls: let the keyboard reach it.
    root.querySelectorAll(".widget-box").forEach(function (box) {
      if (box.scrollWidth > box.clientWidth && !box.hasAttribute("tabindex")) {
        box.setAttribute("tabindex", "0");
      }
    });
    // A live widget's figure: its alt text is the caption the chapter gives the widget
    // (an HTML widget with the class "figure-caption"), else it names the controls.
    root.querySelectorAll(".jupyter-widgets img:not([alt])").forEach(function (img) {
      var box = img.closest(".widget-interact, .widget-vbox, .widget-box") || document;
      var caption = text(box.querySelector(".figure-caption"));
      var controls = Array.prototype.map.call(
        box.querySelectorAll(".widget-label"), text).filter(Boolean).join(", ");
      img.setAttribute("alt", caption ||
        ("Figure drawn by the controls " + (controls || "above") + " for their saved values"));
    });
  }
  function start() {
    var pending = false;
    fix(document);
    new MutationObserver(function () {
      if (pending) { return; }
      pending = true;
      setTimeout(function () { pending = false; fix(document); }, 50);
    }).observe(document.body, { childList: true, subtree: true });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
