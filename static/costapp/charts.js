// Draws every chart on a page from the figure JSON its template wrote with
// json_script: <div class="plot" data-figure="ID" [data-figure-key="K"]>.
// Pages carry no inline script, so the CSP's script-src 'self' holds.
(function () {
  "use strict";

  function figureFrom(id, key) {
    var node = document.getElementById(id);
    if (!node) return null;
    var value = JSON.parse(node.textContent);
    // The capacity pages hand the figure over as a JSON string.
    if (typeof value === "string") value = JSON.parse(value);
    if (value && key) value = value[key];
    return value || null;
  }

  function draw() {
    document.querySelectorAll("[data-figure]").forEach(function (el) {
      var fig = figureFrom(el.dataset.figure, el.dataset.figureKey);
      if (!fig) return;
      // A figure taller than the default keeps its height when plotly
      // resizes it with the window (it follows the container's height).
      if (fig.layout && fig.layout.height) {
        el.style.height = fig.layout.height + "px";
      }
      // A time axis shared by every trace is sent once (fig.x).
      if (fig.x) {
        fig.data.forEach(function (trace) {
          if (trace.x === undefined) trace.x = fig.x;
        });
      }
      Plotly.newPlot(el, fig.data, fig.layout, {
        displaylogo: false,
        responsive: true,
        displayModeBar: el.dataset.modebar === "off" ? false : "hover"
      }).then(function () {
        el.on("plotly_click", follow);
      });
    });
  }

  // A point of a trace marked meta.links carries the URL of its explanation
  // in customdata (flagged days on the deployment page): a click opens it.
  function follow(event) {
    var point = event && event.points && event.points[0];
    if (!point || !point.data.meta || !point.data.meta.links) return;
    var url = point.customdata;
    if (typeof url === "string" && url.charAt(0) === "/") {
      window.location.assign(url);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
