// memtrace report: how numbers, times and stacks read, and the small DOM helper the page is built with.
// Shared by the other mt_*.js files through window.MT; plain ES2020, no build step.
(function () {
  'use strict';
  const MT = (window.MT = window.MT || {});

  const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

  // "1.50 GiB": three significant digits, binary units (the text reports use the same ones).
  MT.bytes = function (n) {
    if (n == null || !isFinite(n)) return '–';
    const neg = n < 0;
    let v = Math.abs(n);
    let u = 0;
    while (v >= 1024 && u < UNITS.length - 1) {
      v /= 1024;
      u++;
    }
    let s;
    if (u === 0) s = String(Math.round(v));
    else if (v < 10) s = v.toFixed(2);
    else if (v < 100) s = v.toFixed(1);
    else s = v.toFixed(0);
    if (u > 0 && s === '1024' && u < UNITS.length - 1) return (neg ? '−' : '') + '1.00 ' + UNITS[u + 1];
    return (neg ? '−' : '') + s + ' ' + UNITS[u];
  };

  // An axis's labels, all in one unit (that of its largest tick) and as precise as the ticks need:
  // "0.5 GiB, 1.0 GiB, 1.5 GiB", not "512 MiB, 1.0 GiB".
  MT.bytesTicks = function (splits, step) {
    let top = 0;
    for (const v of splits) top = Math.max(top, Math.abs(v));
    let u = 0;
    while (u < UNITS.length - 1 && top >= 1024 ** (u + 1)) u++;
    const vals = splits.map((v) => v / 1024 ** u);
    let decimals = 0;
    while (decimals < 3 && vals.some((x) => Math.abs(x * 10 ** decimals - Math.round(x * 10 ** decimals)) > 1e-6)) decimals++;
    return vals.map((x) => (x === 0 ? '0' : x.toFixed(decimals) + ' ' + UNITS[u]));
  };

  MT.exactBytes = function (n) {
    return n == null ? '–' : Number(n).toLocaleString('en-US') + ' bytes';
  };

  MT.count = function (n) {
    return n == null ? '–' : Number(n).toLocaleString('en-US');
  };

  MT.percent = function (part, whole) {
    if (!whole) return '–';
    const p = (100 * part) / whole;
    if (p > 0 && p < 0.1) return '<0.1%';
    return (p >= 10 ? p.toFixed(0) : p.toFixed(1)) + '%';
  };

  // A span of microseconds as people say it: "850 µs", "12.5 ms", "3.20 s", "4 min 12 s", "2 h 05 min".
  MT.duration = function (us) {
    if (us == null || !isFinite(us)) return '–';
    const a = Math.abs(us);
    const sign = us < 0 ? '−' : '';
    if (a < 1000) return sign + Math.round(a) + ' µs';
    if (a < 1e6) return sign + trim3(a / 1e3) + ' ms';
    if (a < 60e6) return sign + trim3(a / 1e6) + ' s';
    const s = Math.round(a / 1e6);
    if (s < 3600) return sign + Math.floor(s / 60) + ' min ' + pad2(s % 60) + ' s';
    return sign + Math.floor(s / 3600) + ' h ' + pad2(Math.floor((s % 3600) / 60)) + ' min';
  };

  function trim3(v) {
    return v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0);
  }
  function pad2(v) {
    return (v < 10 ? '0' : '') + v;
  }

  // A point in the history: "1:02:03.5" (time since the history's start) or "entry 12,345" where
  // the file has no times. As precise as a history that long needs (MT.setSpan).
  MT.timeStep = 1;
  MT.setSpan = function (spanUs) {
    MT.timeStep = spanUs > 0 ? Math.max(1, 10 ** Math.floor(Math.log10(spanUs / 1e5))) : 1;
  };
  MT.timeLabel = function (t, unit) {
    if (unit === 'entry') return 'entry ' + MT.count(Math.round(t));
    return MT.clock(t, MT.timeStep);
  };

  // Tick labels on the time axis, precise to the step between ticks.
  MT.clock = function (us, stepUs) {
    const neg = us < 0;
    let a = Math.abs(us);
    const h = Math.floor(a / 3600e6);
    a -= h * 3600e6;
    const m = Math.floor(a / 60e6);
    a -= m * 60e6;
    const s = a / 1e6;
    const decimals = stepUs >= 1e6 ? 0 : Math.min(6, Math.ceil(-Math.log10(stepUs / 1e6) - 1e-9));
    let sec = s.toFixed(decimals);
    if (parseFloat(sec) >= 60) sec = (60 - 10 ** -decimals).toFixed(decimals);
    const secPadded = (parseFloat(sec) < 10 ? '0' : '') + sec;
    const body = h > 0 ? h + ':' + pad2(m) + ':' + secPadded : m > 0 ? m + ':' + secPadded : sec + ' s';
    return (neg ? '−' : '') + body;
  };

  // Ticks on a byte axis fall on powers of two (so they read 256 MiB, 512 MiB, 768 MiB, 1 GiB).
  MT.byteIncrs = (function () {
    const out = [];
    for (let e = 0; e <= 52; e++) out.push(2 ** e);
    return out;
  })();

  // Ticks on a time axis in microseconds fall on round clock values.
  MT.timeIncrs = (function () {
    const out = [];
    for (let d = 1; d < 1e6; d *= 10) out.push(d, 2 * d, 5 * d);
    const s = 1e6;
    out.push(s, 2 * s, 5 * s, 10 * s, 15 * s, 30 * s, 60 * s, 120 * s, 300 * s, 600 * s, 900 * s, 1800 * s);
    const h = 3600 * s;
    out.push(h, 2 * h, 3 * h, 6 * h, 12 * h, 24 * h, 48 * h, 7 * 24 * h);
    return out;
  })();

  // el('div', {class: 'x', 'data-y': 1}, child, 'text', ...): the page's only way of making elements.
  MT.el = function (tag, attrs) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const k in attrs) {
        const v = attrs[k];
        if (v == null || v === false) continue;
        if (k === 'text') e.textContent = v;
        else if (k === 'onclick') e.addEventListener('click', v);
        else if (k === 'onchange') e.addEventListener('change', v);
        else if (k === 'oninput') e.addEventListener('input', v);
        else e.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (let i = 2; i < arguments.length; i++) append(e, arguments[i]);
    return e;
  };

  function append(parent, c) {
    if (c == null || c === false) return;
    if (Array.isArray(c)) c.forEach((x) => append(parent, x));
    else parent.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }

  // A frame's kind from its label, for its colour: the program's Python code, a library's Python,
  // native code, and the page's own nodes (the root, "(smaller stacks)").
  MT.frameKind = function (label) {
    if (!label || label.charAt(0) === '(') return 'meta';
    const m = /\(([^()]*\.py):\d+\)\s*$/.exec(label);
    if (m) {
      return /(^|\/)(site-packages|dist-packages|torch|lib\/python3[^/]*)\/|<frozen/.test(m[1]) ? 'pylib' : 'python';
    }
    return 'native';
  };

  // The frames of stack `s` in tree `kind` ("short" or "all"), innermost first: the leaf's path to
  // the root, as the text reports print it (docs/reports.md, "Readable stacks").
  MT.stackFrames = function (report, s, kind) {
    const st = report.stacks && report.stacks[s];
    if (!st) return [];
    const tree = report.trees[kind];
    const out = [];
    for (let n = st[kind]; n > 0 && out.length < 10000; n = tree.parent[n]) out.push(report.strings[tree.name[n]] || '?');
    return out;
  };

  // A stack as a cell: its innermost frame, and the whole stack when opened.
  MT.stackCell = function (report, s, kind) {
    const frames = MT.stackFrames(report, s, kind);
    if (!frames.length) return MT.el('span', { class: 'muted', text: 'no stack' });
    if (frames.length === 1) return MT.el('code', { class: 'frame', text: frames[0] });
    return MT.el('details', { class: 'stack' },
      MT.el('summary', null, MT.el('code', { class: 'frame', text: frames[0] }),
        MT.el('span', { class: 'muted', text: ' +' + (frames.length - 1) + ' frames' })),
      MT.el('ol', { class: 'frames' }, frames.map((f) => MT.el('li', null, MT.el('code', { text: f })))));
  };

  // The owners' colours: muted and told apart in print and by most colour-blind readers.
  MT.ownerColors = ['#4e79a7', '#f28e2b', '#59a14f', '#b07aa1', '#76b7b2', '#edc948', '#e15759', '#9c755f',
    '#bab0ac', '#ff9da7'];
  MT.ownerColor = function (id) {
    return MT.ownerColors[id % MT.ownerColors.length];
  };

  // c mixed with white: t = 0 gives c, 1 gives white (opaque fills that still stack legibly).
  MT.tint = function (hex, t) {
    const n = parseInt(hex.slice(1), 16);
    const mix = (x) => Math.round(x + (255 - x) * t);
    return 'rgb(' + mix(n >> 16) + ',' + mix((n >> 8) & 255) + ',' + mix(n & 255) + ')';
  };

  // Index of the last element of sorted `a` that is <= v (0 when none is).
  MT.lowerIndex = function (a, v) {
    let lo = 0;
    let hi = a.length - 1;
    if (hi < 0 || v <= a[0]) return 0;
    if (v >= a[hi]) return hi;
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (a[mid] <= v) lo = mid;
      else hi = mid;
    }
    return lo;
  };

  MT.ownerName = function (report, id) {
    return (report.owners && report.owners[id]) || 'owner ' + id;
  };
})();
