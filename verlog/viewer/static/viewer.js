/* verlog view: the page's script (inlined into the generated HTML; reads the JSON in #verlog-data, no network).
 *
 * Two views, chosen by the URL hash: the overview (summary, learning curves, episode list with filters and pages)
 * and, for "#episode=<id>", one episode (value/advantage chart, KL/entropy split chart, turn table).
 * When a view is drawn, <body data-ready="1"> is set (the browser test waits for nothing else).
 */
(function () {
  "use strict";

  var DATA = JSON.parse(document.getElementById("verlog-data").textContent);
  var SVG_NS = "http://www.w3.org/2000/svg";
  var PAGE_SIZE = 50;
  var COLORS = ["#2f6fdb", "#e07b00", "#1b8a4b", "#8e44ad", "#c0392b", "#16a2b8", "#7f8c8d", "#b7950b"];
  var state = {
    curves: (DATA.metrics.defaults || []).slice(),
    page: 0,
    sort: { key: null, dir: 1 },
    filter: { src: "", env: "", ok: "", itMin: "", itMax: "", retMin: "", retMax: "", q: "", detail: false },
  };
  if (!state.curves.length) {
    state.curves = Object.keys(DATA.metrics.series || {}).slice(0, 6);
  }

  // ------------------------------------------------------------------------------------------ helpers
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }
  function svgEl(tag, attrs, children) {
    var node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }
  function setAttrs(node, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined || v === false) return;
      if (k === "text") node.textContent = v;
      else if (k.slice(0, 2) === "on") node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    });
  }
  function append(node, children) {
    if (children === null || children === undefined) return;
    if (!Array.isArray(children)) children = [children];
    children.forEach(function (c) {
      if (c === null || c === undefined || c === false) return;
      node.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
    });
  }
  function isNum(x) {
    return typeof x === "number" && isFinite(x);
  }
  function fmt(x, digits) {
    if (!isNum(x)) return "\u2013";
    var a = Math.abs(x);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return x.toExponential(2);
    return String(Number(x.toFixed(digits === undefined ? 3 : digits)));
  }
  function perToken(span, index) {
    // span = [tokens, logprob_sum, kl_sum, entropy_sum]
    if (!span || !span[0] || !isNum(span[index])) return null;
    return span[index] / span[0];
  }
  function niceTicks(lo, hi, count) {
    if (lo === hi) {
      var pad = lo === 0 ? 1 : Math.abs(lo) * 0.1;
      lo -= pad;
      hi += pad;
    }
    var raw = (hi - lo) / Math.max(count, 1);
    var mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 2.5, 5, 10].map(function (m) { return m * mag; }).filter(function (s) { return s >= raw; })[0];
    var start = Math.floor(lo / step) * step;
    var ticks = [Number(start.toFixed(12))];
    while (ticks[ticks.length - 1] < hi - step * 1e-9) {
      ticks.push(Number((start + ticks.length * step).toFixed(12)));
    }
    return ticks;
  }

  // ------------------------------------------------------------------------------------------ charts
  /* A line chart in SVG. opts: {id, width, height, xlabel, series: [{name, color, xs, ys, lo, hi, bars, dash}],
   * onpoint(x)}: null values leave gaps; lo/hi draw a band; bars draw columns from 0. */
  function lineChart(opts) {
    var W = opts.width || 420, H = opts.height || 200;
    var m = { l: 50, r: 12, t: 22, b: 30 };
    var xs = [], ys = [];
    opts.series.forEach(function (s) {
      s.xs.forEach(function (x, i) {
        [s.ys[i], s.lo ? s.lo[i] : null, s.hi ? s.hi[i] : null].forEach(function (y) {
          if (isNum(x) && isNum(y)) { xs.push(x); ys.push(y); }
        });
      });
      if (s.bars) ys.push(0);
    });
    var svg = svgEl("svg", {
      id: opts.id, "class": "chart", viewBox: "0 0 " + W + " " + H, width: W, height: H,
      role: "img", "aria-label": opts.label || "chart",
    });
    if (!xs.length) {
      svg.appendChild(svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", text: "no data" }));
      return svg;
    }
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var yt = niceTicks(Math.min.apply(null, ys), Math.max.apply(null, ys), 4);
    var y0 = yt[0], y1 = yt[yt.length - 1];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    function sx(x) { return m.l + (x - x0) / (x1 - x0) * (W - m.l - m.r); }
    function sy(y) { return H - m.b - (y - y0) / (y1 - y0) * (H - m.t - m.b); }
    var grid = svgEl("g", {});
    function tickLabel(t, step) {
      var a = Math.abs(t);
      if (a !== 0 && (a >= 1e5 || a < 1e-4)) return t.toExponential(1);
      var d = 0;
      while (d < 8 && Math.abs(step * Math.pow(10, d) - Math.round(step * Math.pow(10, d))) > 1e-6) d++;
      return t.toFixed(d);
    }
    var ystep = yt.length > 1 ? yt[1] - yt[0] : 1;
    var ylabels = yt.map(function (t) { return tickLabel(t, ystep); });
    m.l = Math.max(34, 10 + 6 * Math.max.apply(null, ylabels.map(function (l) { return l.length; })));
    yt.forEach(function (t, k) {
      grid.appendChild(svgEl("line", { "class": "grid", x1: m.l, x2: W - m.r, y1: sy(t), y2: sy(t) }));
      grid.appendChild(svgEl("text", { x: m.l - 4, y: sy(t) + 3, "text-anchor": "end", text: ylabels[k] }));
    });
    var integral = xs.every(function (x) { return Math.round(x) === x; });
    var xt = niceTicks(x0, x1, integral ? Math.max(1, Math.min(6, x1 - x0)) : 6);
    var xstep = xt.length > 1 ? xt[1] - xt[0] : 1;
    xt.forEach(function (t) {
      if (t < x0 - 1e-9 || t > x1 + 1e-9) return;
      grid.appendChild(svgEl("text", { x: sx(t), y: H - m.b + 12, "text-anchor": "middle", text: tickLabel(t, xstep) }));
    });
    grid.appendChild(svgEl("line", { "class": "axis", x1: m.l, x2: m.l, y1: m.t, y2: H - m.b }));
    grid.appendChild(svgEl("line", { "class": "axis", x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b }));
    if (y0 < 0 && y1 > 0) {
      grid.appendChild(svgEl("line", { "class": "axis", x1: m.l, x2: W - m.r, y1: sy(0), y2: sy(0) }));
    }
    if (opts.xlabel) {
      grid.appendChild(svgEl("text", { x: W - m.r, y: H - 4, "text-anchor": "end", text: opts.xlabel }));
    }
    svg.appendChild(grid);
    var legend = svgEl("g", { "class": "legend" });
    var lx = m.l + 4;
    opts.series.forEach(function (s, k) {
      var color = s.color || COLORS[k % COLORS.length];
      var n = s.xs.length;
      var barW = Math.max(2, Math.min(14, (W - m.l - m.r) / Math.max(n, 1) * 0.5));
      if (s.lo && s.hi) {
        var upper = [], lower = [];
        for (var i = 0; i < n; i++) {
          if (isNum(s.lo[i]) && isNum(s.hi[i])) {
            upper.push(sx(s.xs[i]) + "," + sy(s.hi[i]));
            lower.unshift(sx(s.xs[i]) + "," + sy(s.lo[i]));
          }
        }
        if (upper.length > 1) {
          svg.appendChild(svgEl("polygon", { points: upper.concat(lower).join(" "), fill: color, opacity: 0.15 }));
        }
      }
      if (s.bars) {
        var g = svgEl("g", { "class": "bars", "data-series": s.name });
        for (var j = 0; j < n; j++) {
          if (!isNum(s.ys[j])) continue;
          var top = Math.min(sy(0), sy(s.ys[j])), h = Math.max(1, Math.abs(sy(0) - sy(s.ys[j])));
          g.appendChild(svgEl("rect", {
            x: sx(s.xs[j]) - barW / 2, y: top, width: barW, height: h, fill: color, opacity: 0.55,
          }, svgEl("title", { text: s.name + " " + fmt(s.ys[j], 4) + " at " + fmt(s.xs[j], 4) })));
        }
        svg.appendChild(g);
      } else {
        var d = "", pen = false, count = 0;
        for (var q = 0; q < n; q++) {
          if (isNum(s.xs[q]) && isNum(s.ys[q])) {
            d += (pen ? "L" : "M") + sx(s.xs[q]).toFixed(1) + " " + sy(s.ys[q]).toFixed(1) + " ";
            pen = true;
            count++;
          } else {
            pen = false;
          }
        }
        if (d) {
          svg.appendChild(svgEl("path", {
            d: d, fill: "none", stroke: color, "stroke-width": 1.8, "stroke-dasharray": s.dash || null,
            "class": "series", "data-series": s.name, "data-points": count,
          }));
        }
        if (n <= 200) {
          for (var p = 0; p < n; p++) {
            if (!isNum(s.xs[p]) || !isNum(s.ys[p])) continue;
            var xv = s.xs[p];
            svg.appendChild(svgEl("circle", {
              cx: sx(xv), cy: sy(s.ys[p]), r: n > 60 ? 1.8 : 2.8, fill: color,
              style: opts.onpoint ? "cursor:pointer" : null,
              onclick: opts.onpoint ? (function (x) { return function () { opts.onpoint(x); }; })(xv) : null,
            }, svgEl("title", { text: s.name + " " + fmt(s.ys[p], 4) + " at " + fmt(xv, 4) })));
          }
        }
      }
      var item = svgEl("g", { transform: "translate(" + lx + "," + 11 + ")" });
      item.appendChild(svgEl("rect", { x: 0, y: -7, width: 10, height: 8, fill: color }));
      item.appendChild(svgEl("text", { x: 13, y: 0, text: s.name }));
      legend.appendChild(item);
      lx += 24 + 6.2 * s.name.length;
    });
    svg.appendChild(legend);
    return svg;
  }

  // ------------------------------------------------------------------------------------------ overview
  function header() {
    return el("header", { "class": "top" }, [
      el("h1", { text: DATA.title }),
      el("span", { "class": "sub", text: "generated " + DATA.generated + " \u00b7 " + DATA.format }),
    ]);
  }

  function summaryCard() {
    var dl = el("dl", { "class": "summary" });
    DATA.summary.forEach(function (pair) {
      dl.appendChild(el("dt", { text: pair[0] }));
      dl.appendChild(el("dd", { text: String(pair[1]) }));
    });
    var notes = DATA.notes.length
      ? el("ul", { "class": "notes" }, DATA.notes.map(function (n) { return el("li", { text: n }); }))
      : null;
    return el("section", { "class": "card", id: "summary" }, [el("h2", { text: "Run" }), dl, notes]);
  }

  function curveCard(key) {
    var M = DATA.metrics;
    var ys = M.series[key];
    var se = M.series[key + "_se"];
    var series = {
      name: key, xs: M.steps, ys: ys,
      lo: se ? ys.map(function (v, i) { return isNum(v) && isNum(se[i]) ? v - se[i] : null; }) : null,
      hi: se ? ys.map(function (v, i) { return isNum(v) && isNum(se[i]) ? v + se[i] : null; }) : null,
    };
    var card = el("div", { "class": "chart-card", "data-key": key }, [
      el("h3", { text: key + (se ? "  (\u00b1 standard error)" : "") }),
      el("button", {
        "class": "remove", title: "remove this chart", text: "\u00d7",
        onclick: function () {
          state.curves = state.curves.filter(function (k) { return k !== key; });
          renderCurves();
        },
      }),
      lineChart({ width: 420, height: 190, series: [series], xlabel: "iteration", label: key }),
    ]);
    return card;
  }

  function renderCurves() {
    var box = document.getElementById("charts");
    if (!box) return;
    box.textContent = "";
    state.curves.forEach(function (k) { if (DATA.metrics.series[k]) box.appendChild(curveCard(k)); });
  }

  function curvesCard() {
    var M = DATA.metrics;
    var keys = Object.keys(M.series || {});
    if (!M.steps || !M.steps.length) {
      return el("section", { "class": "card", id: "curves" }, [
        el("h2", { text: "Learning curves" }), el("p", { "class": "empty", text: "no metrics.jsonl records" }),
      ]);
    }
    var select = el("select", { id: "curve-key" }, keys.map(function (k) { return el("option", { value: k, text: k }); }));
    var controls = el("div", { "class": "controls" }, [
      el("label", {}, ["metric", select]),
      el("button", {
        text: "add chart",
        onclick: function () {
          if (state.curves.indexOf(select.value) < 0) state.curves.push(select.value);
          renderCurves();
        },
      }),
      el("span", { "class": "muted", text: keys.length + " numeric metrics over " + M.steps.length + " steps" }),
    ]);
    return el("section", { "class": "card", id: "curves" }, [
      el("h2", { text: "Learning curves" }), controls, el("div", { "class": "charts", id: "charts" }),
    ]);
  }

  function filtered() {
    var f = state.filter;
    function num(s) { return s === "" ? null : Number(s); }
    var itMin = num(f.itMin), itMax = num(f.itMax), rMin = num(f.retMin), rMax = num(f.retMax);
    var q = f.q.toLowerCase();
    var out = DATA.episodes.filter(function (e) {
      if (f.src && e.src !== f.src) return false;
      if (f.env && e.env !== f.env) return false;
      if (f.ok === "yes" && e.ok !== true) return false;
      if (f.ok === "no" && e.ok !== false) return false;
      if (f.ok === "open" && e.ok !== null) return false;
      if (itMin !== null && !(isNum(e.it1) && e.it1 >= itMin)) return false;
      if (itMax !== null && !(isNum(e.it0) && e.it0 <= itMax)) return false;
      if (rMin !== null && !(isNum(e.ret) && e.ret >= rMin)) return false;
      if (rMax !== null && !(isNum(e.ret) && e.ret <= rMax)) return false;
      if (f.detail && !e.d) return false;
      if (q && e.id.toLowerCase().indexOf(q) < 0) return false;
      return true;
    });
    if (state.sort.key) {
      var k = state.sort.key, dir = state.sort.dir;
      out = out.slice().sort(function (a, b) {
        var x = a[k], y = b[k];
        if (x === y) return 0;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * dir;
      });
    }
    return out;
  }

  var EP_COLUMNS = [
    ["id", "episode", ""], ["src", "source", ""], ["env", "env", ""], ["seed", "seed", "num"],
    ["it0", "iterations", "num"], ["n", "turns", "num"], ["ret", "return", "num"], ["ok", "success", ""],
    ["end", "end", ""], ["valid", "valid", "num"], ["v0", "V(s\u2080)", "num"],
  ];

  function renderEpisodeRows() {
    var body = document.getElementById("episode-rows");
    var pager = document.getElementById("episode-pager");
    if (!body) return;
    var rows = filtered();
    var pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
    state.page = Math.min(state.page, pages - 1);
    body.textContent = "";
    rows.slice(state.page * PAGE_SIZE, (state.page + 1) * PAGE_SIZE).forEach(function (e) {
      var its = isNum(e.it0) ? (e.it0 === e.it1 ? String(e.it0) : e.it0 + "\u2013" + e.it1) : "\u2013";
      body.appendChild(el("tr", { "class": "episode", "data-id": e.id }, [
        el("td", {}, e.d
          ? el("a", { href: "#episode=" + encodeURIComponent(e.id), text: e.id })
          : el("span", { "class": "muted", title: "turns not embedded (verlog view --max-episodes)", text: e.id })),
        el("td", { text: e.src }),
        el("td", { text: e.env }),
        el("td", { "class": "num", text: e.seed === null || e.seed === undefined ? "\u2013" : String(e.seed) }),
        el("td", { "class": "num", text: its }),
        el("td", { "class": "num", text: String(e.n) }),
        el("td", { "class": "num", text: fmt(e.ret) }),
        el("td", {}, e.ok === null ? el("span", { "class": "muted", text: "\u2013" })
          : el("span", { "class": e.ok ? "yes" : "no", text: e.ok ? "yes" : "no" })),
        el("td", { text: e.end }),
        el("td", { "class": "num", text: fmt(e.valid, 2) }),
        el("td", { "class": "num", text: fmt(e.v0) }),
      ]));
    });
    pager.textContent = "";
    append(pager, [
      el("button", { text: "\u2039 prev", disabled: state.page === 0, onclick: function () { state.page--; renderEpisodeRows(); } }),
      el("span", { text: "page " + (state.page + 1) + " of " + pages + " \u00b7 " + rows.length + " of " +
        DATA.episodes.length + " episodes" }),
      el("button", { text: "next \u203a", disabled: state.page >= pages - 1, onclick: function () { state.page++; renderEpisodeRows(); } }),
    ]);
    saveListHash();
  }

  // The episode list's filters, sort and page live in the URL hash ("#src=eval&ok=no&sort=-ret&page=2"), so a link
  // (or a headless browser) can open a filtered list.
  function listHash() {
    var parts = [];
    Object.keys(state.filter).forEach(function (k) {
      var v = state.filter[k];
      if (v === true) parts.push(k + "=1");
      else if (v) parts.push(k + "=" + encodeURIComponent(v));
    });
    if (state.sort.key) parts.push("sort=" + (state.sort.dir < 0 ? "-" : "") + state.sort.key);
    if (state.page > 0) parts.push("page=" + (state.page + 1));
    return parts.join("&");
  }

  function saveListHash() {
    if (!state.ready || document.getElementById("overview").hidden) return;
    var hash = listHash();
    if (location.hash.slice(1) === hash) return;
    try {
      history.replaceState(null, "", hash ? "#" + hash : location.pathname + location.search);
    } catch (err) {
      // some browsers refuse history changes on file:// pages: the list still works, only the URL lags behind
    }
  }

  function readListHash(hash) {
    hash.split("&").forEach(function (pair) {
      var at = pair.indexOf("=");
      if (at < 0) return;
      var k = pair.slice(0, at), v = decodeURIComponent(pair.slice(at + 1));
      if (k === "detail") state.filter.detail = v === "1";
      else if (k === "sort") state.sort = { key: v.replace(/^-/, ""), dir: v.charAt(0) === "-" ? -1 : 1 };
      else if (k === "page") state.page = Math.max(0, (parseInt(v, 10) || 1) - 1);
      else if (Object.prototype.hasOwnProperty.call(state.filter, k)) state.filter[k] = v;
    });
  }

  function episodesCard() {
    function uniq(key) {
      var seen = {};
      DATA.episodes.forEach(function (e) { seen[e[key]] = true; });
      return Object.keys(seen).sort();
    }
    function choice(label, key, options) {
      var s = el("select", {
        "data-filter": key,
        onchange: function () { state.filter[key] = s.value; state.page = 0; renderEpisodeRows(); },
      }, [el("option", { value: "", text: "all" })].concat(options.map(function (o) {
        return el("option", { value: o[0], text: o[1], selected: state.filter[key] === o[0] });
      })));
      return el("label", {}, [label, s]);
    }
    function field(label, key, type) {
      var i = el("input", {
        type: type, "data-filter": key, step: "any", value: state.filter[key] || null,
        oninput: function () { state.filter[key] = i.value; state.page = 0; renderEpisodeRows(); },
      });
      return el("label", {}, [label, i]);
    }
    var detail = el("input", {
      type: "checkbox", checked: state.filter.detail,
      onchange: function () { state.filter.detail = detail.checked; state.page = 0; renderEpisodeRows(); },
    });
    var controls = el("div", { "class": "controls" }, [
      choice("source", "src", uniq("src").map(function (s) { return [s, s]; })),
      choice("env", "env", uniq("env").map(function (s) { return [s, s]; })),
      choice("success", "ok", [["yes", "yes"], ["no", "no"], ["open", "not finished"]]),
      field("iteration \u2265", "itMin", "number"), field("\u2264", "itMax", "number"),
      field("return \u2265", "retMin", "number"), field("\u2264", "retMax", "number"),
      field("id", "q", "search"),
      el("label", {}, [detail, "with turns only"]),
    ]);
    var headRow = el("tr", {}, EP_COLUMNS.map(function (c) {
      return el("th", {
        "class": "sortable " + c[2], title: "sort",
        onclick: function () {
          state.sort = { key: c[0], dir: state.sort.key === c[0] ? -state.sort.dir : 1 };
          renderEpisodeRows();
        },
      }, c[1]);
    }));
    return el("section", { "class": "card", id: "episodes" }, [
      el("h2", { text: "Episodes" }),
      DATA.episodes.length ? null : el("p", { "class": "empty", text: "no episodes on tape" }),
      controls,
      el("table", { id: "episode-table" }, [el("thead", {}, headRow), el("tbody", { id: "episode-rows" })]),
      el("div", { "class": "pager", id: "episode-pager" }),
    ]);
  }

  // ------------------------------------------------------------------------------------------ episode
  function spanCell(span, show) {
    if (!span) return el("td", { "class": "split muted", text: "\u2013" });
    var kl = perToken(span, 2), h = perToken(span, 3), lp = perToken(span, 1);
    return el("td", { "class": "split" }, [
      el("div", {}, [el("b", { text: String(span[0]) }), " tok"]),
      show.kl ? el("div", { title: "KL to the reference per token (log \u03c0 \u2212 log \u03c0_ref)", text: "KL " + fmt(kl, 4) }) : null,
      show.h ? el("div", { title: "policy entropy per token", text: "H " + fmt(h, 3) }) : null,
      el("div", { title: "mean log-prob per token", text: "lp " + fmt(lp, 3) }),
    ]);
  }

  function turnRow(t, show) {
    var end = t.end ? el("span", { "class": "badge end", text: t.end }) : null;
    var action = el("td", { "class": "act" }, [
      el("div", { "class": "exec", text: t.a || "\u2013" }),
      t.pa && t.pa !== t.a ? el("div", { "class": "muted", title: "the answer the parser read", text: "parsed: " + t.pa }) : null,
      el("span", { "class": "badge " + (t.ok ? "valid" : "invalid"), text: t.ok ? "valid" : "invalid" }),
      " ", end,
      t.err ? el("div", { "class": "no", title: String(t.err), text: "error" }) : null,
    ]);
    return el("tr", { "class": "turn", id: "turn-" + t.t, "data-turn": t.t }, [
      el("td", { "class": "num" }, [el("b", { text: String(t.t) }), el("div", { "class": "muted", text: isNum(t.it) ? "it " + t.it : "" })]),
      show.frames ? el("td", {}, t.f ? el("img", { "class": "frame", alt: "frame of turn " + t.t, src: "data:image/png;base64," + t.f }) : el("span", { "class": "muted", text: "\u2013" })) : null,
      el("td", {}, el("pre", { "class": "text obs", text: t.obs || "" })),
      el("td", {}, el("pre", { "class": "text thought", text: t.th || "" })),
      action,
      el("td", { "class": "num", text: fmt(t.r) }),
      el("td", { "class": "num", text: fmt(t.v) }),
      el("td", { "class": "num", title: isNum(t.advr) ? "before whitening: " + fmt(t.advr, 4) : null, text: fmt(t.adv) }),
      el("td", { "class": "num", text: fmt(t.g) }),
      el("td", { "class": "num", text: fmt(t.kl, 4) }),
      spanCell(t.sr, show),
      spanCell(t.sa, show),
      el("td", { "class": "num", text: (t.pt === null ? "\u2013" : t.pt) + " / " + (t.rt === null ? "\u2013" : t.rt) }),
      el("td", { "class": "num", text: t.mem === null || t.mem === undefined ? "\u2013" : String(t.mem) }),
    ]);
  }

  function showEpisode(id) {
    var app = document.getElementById("episode-view");
    var overview = document.getElementById("overview");
    var ep = null;
    DATA.episodes.forEach(function (e) { if (e.id === id) ep = e; });
    var turns = DATA.turns[id];
    overview.hidden = true;
    app.hidden = false;
    app.textContent = "";
    var back = el("a", { "class": "back", href: "#", text: "\u2190 all episodes" });
    if (!ep || !turns) {
      append(app, el("section", { "class": "card", id: "episode" }, [
        back,
        el("p", { "class": "empty", text: ep ? "the turns of " + id + " are not embedded in this page (verlog view --max-episodes)" : "no episode " + id + " in this run" }),
      ]));
      return;
    }
    var xs = turns.map(function (t) { return t.t; });
    function col(k) { return turns.map(function (t) { return isNum(t[k]) ? t[k] : null; }); }
    function spanCol(k, i) { return turns.map(function (t) { return perToken(t[k], i); }); }
    var show = {
      frames: turns.some(function (t) { return !!t.f; }),
      kl: turns.some(function (t) { return perToken(t.sr, 2) !== null || perToken(t.sa, 2) !== null; }),
      h: turns.some(function (t) { return perToken(t.sr, 3) !== null || perToken(t.sa, 3) !== null; }),
    };
    function scrollTo(x) {
      var row = document.getElementById("turn-" + x);
      if (!row) return;
      Array.prototype.forEach.call(document.querySelectorAll("#turn-table tr.highlight"), function (r) { r.classList.remove("highlight"); });
      row.classList.add("highlight");
      row.scrollIntoView({ block: "center" });
    }
    var valueChart = lineChart({
      id: "turn-chart", width: 480, height: 230, xlabel: "turn", label: "value and advantage over the turns",
      onpoint: scrollTo,
      series: [
        { name: "reward", xs: xs, ys: col("r"), bars: true, color: "#95a5a6" },
        { name: "V(s_t)", xs: xs, ys: col("v"), color: "#2f6fdb" },
        { name: "advantage", xs: xs, ys: col("adv"), color: "#e07b00" },
        { name: "return", xs: xs, ys: col("g"), color: "#1b8a4b", dash: "4 3" },
      ].filter(function (s) { return s.bars || s.ys.some(isNum); }),
    });
    var valueTitle = turns.some(function (t) { return isNum(t.v); })
      ? "value, advantage, return and reward over the turns"
      : "reward over the turns (no critic values on this tape: evaluation and schema-1 records have none)";
    function pair(index, what, color, negate) {
      function ys(k) {
        return spanCol(k, index).map(function (v) { return v === null ? null : (negate ? -v : v); });
      }
      return [
        { name: what + " reasoning", xs: xs, ys: ys("sr"), color: color, dash: "4 3" },
        { name: what + " action", xs: xs, ys: ys("sa"), color: color },
      ];
    }
    var splitCharts = [];
    if (show.kl) {
      splitCharts.push(["KL to the reference per token", lineChart({
        id: "kl-chart", width: 480, height: 230, xlabel: "turn", label: "KL per token, reasoning vs action",
        onpoint: scrollTo, series: pair(2, "KL/tok", "#8e44ad"),
      })]);
    }
    if (show.h) {
      splitCharts.push(["policy entropy per token", lineChart({
        id: "entropy-chart", width: 480, height: 230, xlabel: "turn", label: "entropy per token, reasoning vs action",
        onpoint: scrollTo, series: pair(3, "H/tok", "#16a2b8"),
      })]);
    }
    if (!splitCharts.length) {
      var nlp = lineChart({
        id: "logprob-chart", width: 480, height: 230, xlabel: "turn", label: "negative log-prob per token",
        onpoint: scrollTo, series: pair(1, "-log p/tok", "#8e44ad", true),
      });
      splitCharts.push(["-log p per token (no KL or entropy on this tape: evaluation records carry only the " +
        "sampling policy's log-probs)", nlp]);
    }
    var head = el("div", { "class": "epi-head" }, [
      back,
      el("h2", { text: id }),
      el("span", { text: ep.src + " \u00b7 " + ep.env + (ep.seed !== null && ep.seed !== undefined ? " \u00b7 seed " + ep.seed : "") }),
      el("span", { text: "iterations " + (isNum(ep.it0) ? ep.it0 + "\u2013" + ep.it1 : "\u2013") }),
      el("span", { text: ep.n + " turns from turn " + ep.t0 }),
      el("span", { text: "return " + fmt(ep.ret) }),
      el("span", {}, ["success ", ep.ok === null ? "\u2013" : el("span", { "class": ep.ok ? "yes" : "no", text: ep.ok ? "yes" : "no" })]),
      el("span", { text: "end: " + ep.end }),
    ]);
    var headCells = [
      ["turn", "num"], show.frames ? ["frame", ""] : null, ["observation", ""], ["thought", ""], ["action", ""],
      ["reward", "num"], ["V(s_t)", "num"], ["adv.", "num"], ["return", "num"], ["KL ref", "num"],
      ["reasoning tokens", ""], ["action tokens", ""], ["prompt / resp. tok", "num"], ["memory", "num"],
    ].filter(Boolean).map(function (c) { return el("th", { "class": c[1], text: c[0] }); });
    var table = el("table", { id: "turn-table", "data-turns": turns.length }, [
      el("thead", {}, el("tr", {}, headCells)),
      el("tbody", {}, turns.map(function (t) { return turnRow(t, show); })),
    ]);
    append(app, el("section", { "class": "card", id: "episode", "data-episode": id }, [
      head,
      el("div", { "class": "two" }, [
        el("div", { "class": "chart-card" }, [el("h3", { text: valueTitle }), valueChart]),
      ].concat(splitCharts.map(function (c) {
        return el("div", { "class": "chart-card" }, [el("h3", { text: c[0] + " (dashed: reasoning tokens)" }), c[1]]);
      }))),
      el("div", { style: "overflow-x:auto" }, table),
    ]));
    window.scrollTo(0, 0);
  }

  function showOverview(hash) {
    document.getElementById("episode-view").hidden = true;
    document.getElementById("overview").hidden = false;
    if (hash && hash !== listHash()) {
      state.filter = { src: "", env: "", ok: "", itMin: "", itMax: "", retMin: "", retMax: "", q: "", detail: false };
      state.sort = { key: null, dir: 1 };
      state.page = 0;
      readListHash(hash);
      var old = document.getElementById("episodes");
      old.parentNode.replaceChild(episodesCard(), old);
    }
    renderEpisodeRows();
  }

  function route() {
    var hash = location.hash.slice(1);
    var match = /^episode=(.*)$/.exec(hash);
    if (match) showEpisode(decodeURIComponent(match[1]));
    else showOverview(hash);
    state.ready = true;
    document.body.setAttribute("data-ready", "1");
  }

  function main() {
    if (!/^episode=/.test(location.hash.slice(1))) readListHash(location.hash.slice(1));
    var app = document.getElementById("app");
    app.textContent = "";
    append(app, [
      header(),
      el("main", {}, [
        el("div", { id: "overview" }, [summaryCard(), curvesCard(), episodesCard()]),
        el("div", { id: "episode-view", hidden: true }),
      ]),
    ]);
    renderCurves();
    renderEpisodeRows();
    window.addEventListener("hashchange", route);
    route();
  }

  main();
})();
