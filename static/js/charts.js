// Draws the dashboard's charts with uPlot. Each chart is a <div class="chart-canvas"
// data-chart="key"> followed by a JSON spec (<script type="application/json">) that the server
// rendered: {kind: "line"|"bars" (the first series as bars), unit (left axis), x: [unix seconds],
// series: [{label, values, color, axis?: "right"}]}; a series on the right axis has its own
// unit, named by its label.
// Colours come from the page's CSS variables (--chart-1…6, --text, --border), so a chart follows
// the light or dark theme and is drawn again when the theme changes. The canvas is hidden from
// screen readers: the figure's summary and its data table say the same.
(() => {
  const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

  const options = (spec, width) => {
    const text = css("--muted");
    const grid = css("--border");
    const axis = { stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    const bars = spec.kind === "bars" && window.uPlot.paths && window.uPlot.paths.bars;
    const right = spec.series.find((s) => s.axis === "right");  // a second unit, on its own axis
    return {
      width,
      height: 220,
      cursor: { drag: { x: false, y: false } },
      legend: { live: true },
      scales: {
        // (bars: half a day of room at each end, so the first and last bars are whole)
        x: bars ? { time: true, range: (u, lo, hi) => [lo - 43200, hi + 43200] } : { time: true },
        y: { auto: true },
        r: { auto: true },
      },
      axes: [
        axis,
        { ...axis, size: 50, label: spec.unit, labelSize: 18 },
        ...(right ? [{ ...axis, scale: "r", side: 1, size: 50, label: right.label, labelSize: 18, grid: { show: false } }] : []),
      ],
      series: [
        {},
        ...spec.series.map((s, i) => {
          const colour = css(`--chart-${s.color}`) || css("--accent");
          const common = {
            label: s.label, stroke: colour, width: 2, spanGaps: false, points: { show: true, size: 4 },
            scale: s.axis === "right" ? "r" : "y",
          };
          if (!bars || i > 0) return common;  // (bars: the first series; the others are lines over them)
          return { ...common, fill: colour + "88", points: { show: false }, paths: window.uPlot.paths.bars({ size: [0.6, 40] }) };
        }),
      ],
    };
  };

  const draw = (el) => {
    if (!window.uPlot) return;
    const script = el.nextElementSibling;
    if (!script || script.type !== "application/json") return;
    const spec = JSON.parse(script.textContent);
    el.innerHTML = "";
    const width = Math.max(240, el.clientWidth || el.parentElement.clientWidth - 32);
    const data = [spec.x, ...spec.series.map((s) => s.values)];
    el._plot = new window.uPlot(options(spec, width), data, el);
    el.dataset.drawn = "true";
  };

  const drawAll = (root) => {
    (root || document).querySelectorAll(".chart-canvas[data-chart]").forEach((el) => {
      try { draw(el); } catch (error) { console.error("chart", el.dataset.chart, error); }
    });
  };

  const ready = () => drawAll(document);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
  // Live updates swap parts of the page (htmx); draw what they brought.
  document.addEventListener("htmx:load", (event) => drawAll(event.detail.elt));
  // The theme or the width changed: draw again with the new colours and size.
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", ready);
  let resizeTimer = null;
  window.addEventListener("resize", () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(ready, 150); });
})();
