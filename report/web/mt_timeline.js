// memtrace report: memory over time, one uPlot chart per device.
//
// The data holds the history at a few levels of detail, coarse to fine, each covering all of it
// (docs/report.md, "The page's data"). The chart always draws the finest level that keeps the
// points in view under MAX_POINTS, so a zoom into one second of a four-hour run shows every event
// of that second, and the whole run never draws more than a few thousand points. Allocated bytes
// are stacked by owner where the level splits them (the coarse ones do), drawn as one area where
// it does not; reserved bytes are a line above. Markers (peak, out-of-memory, snapshots,
// annotations) and the moments a click can select are drawn on the canvas, not as elements.
(function () {
  'use strict';
  const MT = (window.MT = window.MT || {});

  const MAX_POINTS = 4000;
  // Stacked by owner, a split level is preferred while it still has this many points in view.
  const MIN_SPLIT_POINTS = 300;
  const HEIGHT = 300;
  const MARKER_STYLE = {
    peak: { color: '#1f2328', dash: [], width: 1.5, label: true },
    oom: { color: '#cf222e', dash: [], width: 2, label: true },
    snapshot: { color: '#8250df', dash: [4, 3], width: 1, label: false },
    annotation: { color: '#9a6700', dash: [2, 3], width: 1, label: false },
  };
  const MAX_ANNOTATION_LINES = 24;
  const SELECTED = '#0969da';
  const ALLOCATED_LINE = '#24292f';
  const RESERVED_LINE = '#bc4c00';
  const UNSPLIT_FILL = '#c8d3e0';

  MT.Timeline = function (parent, report, device, onPick) {
    this.report = report;
    this.device = device;
    this.onPick = onPick;
    this.unit = report.header.x_unit === 'entry' ? 'entry' : 'us';
    this.levels = (device.series || []).filter((l) => l && l.t && l.t.length);
    this.owners = (report.owners || []).map((name, id) => ({ id, name }));
    this.selectedT = null;
    this.cache = [];
    this.level = -1;
    this.build(parent);
  };

  const P = MT.Timeline.prototype;

  P.build = function (parent) {
    const el = MT.el;
    this.root = el('div', { class: 'timeline' });
    parent.appendChild(this.root);
    if (!this.levels.length) {
      this.root.appendChild(el('p', { class: 'empty', text: 'No history for this device: nothing to draw over time.' }));
      return;
    }
    this.range = this.fullRange();
    this.canSplit = this.levels.some((l) => l.by_owner);
    this.byOwner = this.canSplit;
    if (this.canSplit) {
      const by = this.report.group_label || 'owner';
      this.modeButtons = [[true, 'Stacked by ' + by], [false, 'Totals, finest detail']].map(([on, label]) => el('button', {
        type: 'button', class: 'seg', 'data-by-owner': on ? 'true' : 'false', 'aria-pressed': on === this.byOwner ? 'true' : 'false',
        text: label, onclick: () => this.setByOwner(on),
      }));
      this.root.appendChild(el('div', { class: 'toolbar' }, el('div', { class: 'segmented', role: 'group', 'aria-label': 'series' }, this.modeButtons)));
    }
    this.readout = el('div', { class: 'readout', 'aria-live': 'off' });
    this.plotBox = el('div', { class: 'plot' });
    this.legend = el('div', { class: 'legend' });
    this.caption = el('div', { class: 'plot-caption' });
    this.root.append(this.readout, this.plotBox, this.legend, this.caption);
    this.orderOwners();
    this.makeLegend();
    this.level = this.chooseLevel(this.range[0], this.range[1]);
    this.makePlot();
    this.watchSize();
  };

  // The x range of the whole history: every level, marker and moment lies inside it.
  P.fullRange = function () {
    let lo = Infinity;
    let hi = -Infinity;
    for (const l of this.levels) {
      lo = Math.min(lo, l.t[0]);
      hi = Math.max(hi, l.t[l.t.length - 1]);
    }
    for (const m of this.device.markers || []) {
      lo = Math.min(lo, m.t);
      hi = Math.max(hi, m.t);
    }
    if (hi <= lo) hi = lo + 1;
    return [lo, hi];
  };

  // Owners stack largest first from the bottom, by their bytes in the coarsest split level.
  P.orderOwners = function () {
    const split = this.levels.find((l) => l.by_owner);
    const total = this.owners.map((o) => {
      const a = split && split.by_owner[o.id];
      let s = 0;
      if (a) for (let i = 0; i < a.length; i++) s += a[i];
      return s;
    });
    this.stackOrder = this.owners.map((o) => o.id).sort((a, b) => total[b] - total[a]);
    // The legend names the owners this device has bytes of, in a split level or at some moment.
    const seen = total.map((s) => s > 0);
    for (const m of this.device.moments || []) (m.by_owner || []).forEach((b, id) => { if (b > 0) seen[id] = true; });
    this.legendOwners = this.stackOrder.filter((id) => seen[id]);
  };

  P.visibleCount = function (level, lo, hi) {
    const t = this.levels[level].t;
    return MT.lowerIndex(t, hi) - MT.lowerIndex(t, lo) + 1;
  };

  P.chooseLevel = function (lo, hi) {
    let finest = 0;
    let split = -1;
    for (let i = 0; i < this.levels.length; i++) {
      const n = this.visibleCount(i, lo, hi);
      if (n > MAX_POINTS) continue;
      finest = i;
      if (this.levels[i].by_owner && n >= MIN_SPLIT_POINTS) split = i;
    }
    return this.byOwner && split >= 0 ? split : finest;
  };

  // uPlot's arrays for one level: x, the owners' running sums (top of the stack first, so each
  // lower owner paints over the one above it), the unsplit area, the allocated and reserved lines.
  P.dataFor = function (level) {
    if (this.cache[level]) return this.cache[level];
    const l = this.levels[level];
    const n = l.t.length;
    const out = [l.t];
    const cums = [];
    if (l.by_owner) {
      let acc = null;
      for (const id of this.stackOrder) {
        const own = l.by_owner[id];
        const next = new Float64Array(n);
        for (let i = 0; i < n; i++) next[i] = (acc ? acc[i] : 0) + (own ? own[i] : 0);
        cums.push(next);
        acc = next;
      }
    }
    for (let k = this.stackOrder.length - 1; k >= 0; k--) out.push(l.by_owner ? cums[k] : l.allocated);
    out.push(l.allocated, l.allocated, l.reserved);
    this.cache[level] = out;
    return out;
  };

  P.makePlot = function () {
    const self = this;
    const stepped = uPlot.paths.stepped({ align: 1 });
    const series = [{}];
    for (let k = this.stackOrder.length - 1; k >= 0; k--) {
      const id = this.stackOrder[k];
      const c = MT.ownerColor(id);
      series.push({ label: this.owners[id].name, stroke: c, width: 1, fill: MT.tint(c, 0.35), paths: stepped, points: { show: false } });
    }
    series.push({ label: 'allocated', stroke: UNSPLIT_FILL, width: 0, fill: UNSPLIT_FILL, paths: stepped, points: { show: false } });
    series.push({ label: 'allocated', stroke: ALLOCATED_LINE, width: 1.25, paths: stepped, points: { show: false } });
    series.push({ label: 'reserved', stroke: RESERVED_LINE, width: 1.5, paths: stepped, points: { show: false } });
    this.unsplitIndex = series.length - 3;
    const range = this.range;
    const opts = {
      width: Math.max(320, this.plotBox.clientWidth || 800),
      height: HEIGHT,
      pxAlign: 0,
      legend: { show: false },
      scales: {
        x: { time: false, range: (u, lo, hi) => self.clamp(lo, hi) },
        y: { range: (u, lo, hi) => [0, hi > 0 ? hi * 1.06 : 1024] },
      },
      axes: [
        {
          space: 90,
          incrs: this.unit === 'us' ? MT.timeIncrs : undefined,
          values: (u, splits, ax, space, incr) => splits.map((v) => (this.unit === 'us' ? MT.clock(v, incr) : MT.count(v))),
          stroke: '#59636e',
          grid: { stroke: '#eaeef2', width: 1 },
          ticks: { stroke: '#d1d9e0', width: 1 },
        },
        {
          size: 78,
          space: 36,
          incrs: MT.byteIncrs,
          values: (u, splits, ax, space, incr) => MT.bytesTicks(splits, incr),
          stroke: '#59636e',
          grid: { stroke: '#eaeef2', width: 1 },
          ticks: { stroke: '#d1d9e0', width: 1 },
        },
      ],
      series,
      cursor: {
        drag: { x: true, y: false, setScale: true },
        points: { show: false },
        bind: { dblclick: () => () => { self.reset(); return null; } },
      },
      hooks: {
        setScale: [(u, key) => key === 'x' && self.onXScale()],
        setCursor: [() => self.updateReadout()],
        draw: [(u) => self.drawOverlay(u)],
      },
    };
    const data = this.dataFor(this.level);
    this.u = new uPlot(opts, data, this.plotBox);
    this.u.setScale('x', { min: range[0], max: range[1] });
    this.applyLevelVisibility();
    this.bindMouse();
    this.updateReadout();
  };

  P.clamp = function (lo, hi) {
    const [a, b] = this.range;
    const minSpan = this.unit === 'us' ? 5 : 2;
    if (lo == null || hi == null || !isFinite(lo) || !isFinite(hi)) return [a, b];
    let span = Math.max(minSpan, hi - lo);
    if (span >= b - a) return [a, b];
    if (lo < a) lo = a;
    if (lo + span > b) lo = b - span;
    return [lo, lo + span];
  };

  P.isSplit = function () {
    return this.byOwner && !!this.levels[this.level].by_owner;
  };

  P.applyLevelVisibility = function () {
    const split = this.isSplit();
    const u = this.u;
    for (let i = 1; i < this.unsplitIndex; i++) if (u.series[i].show !== split) u.setSeries(i, { show: split });
    if (u.series[this.unsplitIndex].show === split) u.setSeries(this.unsplitIndex, { show: !split });
  };

  P.setByOwner = function (on) {
    this.byOwner = on;
    for (const b of this.modeButtons) b.setAttribute('aria-pressed', (b.dataset.byOwner === 'true') === on ? 'true' : 'false');
    this.onXScale(true);
  };

  // The level of detail follows the zoom.
  P.onXScale = function (force) {
    if (this.switching) return;
    const { min, max } = this.u.scales.x;
    const want = this.chooseLevel(min, max);
    if (want !== this.level || force === true) {
      this.switching = true;
      this.level = want;
      this.u.setData(this.dataFor(want), false);
      this.applyLevelVisibility();
      this.u.setScale('x', { min, max });
      this.switching = false;
    }
    this.describeView(min, max);
  };

  P.describeView = function (min, max) {
    const l = this.levels[this.level];
    const i0 = MT.lowerIndex(l.t, min);
    const i1 = MT.lowerIndex(l.t, max);
    let maxA = 0;
    let maxR = 0;
    for (let i = i0; i <= i1; i++) {
      if (l.t[i] < min || l.t[i] > max) continue;
      if (l.allocated[i] > maxA) maxA = l.allocated[i];
      if (l.reserved[i] > maxR) maxR = l.reserved[i];
    }
    const full = min <= this.range[0] && max >= this.range[1];
    const r = this.root;
    r.dataset.level = this.level;
    r.dataset.levels = this.levels.length;
    r.dataset.visiblePoints = Math.max(0, i1 - i0 + 1);
    r.dataset.xMin = min;
    r.dataset.xMax = max;
    r.dataset.maxAllocatedBytes = maxA;
    r.dataset.maxReservedBytes = maxR;
    r.dataset.zoomed = full ? 'false' : 'true';
    r.dataset.split = this.isSplit() ? 'true' : 'false';
    const span = this.unit === 'us' ? MT.duration(max - min) : MT.count(Math.round(max - min)) + ' entries';
    const detail = this.levels.length > 1 && this.level === this.levels.length - 1 ? ' (finest detail)' : '';
    this.caption.textContent = '';
    this.caption.append(
      MT.el('span', null, (full ? 'Whole history' : 'Zoomed to ' + span) + ' · highest allocated in view ' + MT.bytes(maxA) +
        ' · ' + MT.count(Math.max(0, i1 - i0 + 1)) + ' points' + detail + (l.by_owner || !this.canSplit ? '' : this.byOwner ? ' · owners are split at coarser zoom' : '')),
      MT.el('span', { class: 'hint', text: 'Drag to zoom · wheel to zoom · shift+wheel to pan · double-click to reset · click to inspect that moment' }));
  };

  P.reset = function () {
    this.u.setScale('x', { min: this.range[0], max: this.range[1] });
  };

  P.bindMouse = function () {
    const over = this.u.over;
    let down = null;
    over.addEventListener('mousedown', (e) => { down = [e.clientX, e.clientY]; });
    over.addEventListener('click', (e) => {
      if (!down || Math.abs(e.clientX - down[0]) > 3 || Math.abs(e.clientY - down[1]) > 3) return;
      const rect = over.getBoundingClientRect();
      const t = this.u.posToVal(e.clientX - rect.left, 'x');
      if (this.onPick) this.onPick(t);
    });
    over.addEventListener('wheel', (e) => this.onWheel(e), { passive: false });
  };

  P.onWheel = function (e) {
    e.preventDefault();
    const { min, max } = this.u.scales.x;
    const span = max - min;
    const dx = e.deltaX;
    const dy = e.deltaY;
    if (e.shiftKey || Math.abs(dx) > Math.abs(dy)) {
      const d = (e.shiftKey ? dy || dx : dx) > 0 ? 1 : -1;
      const [lo, hi] = this.clamp(min + d * span * 0.15, max + d * span * 0.15);
      this.u.setScale('x', { min: lo, max: hi });
      return;
    }
    if (!dy) return;
    const rect = this.u.over.getBoundingClientRect();
    const at = this.u.posToVal(e.clientX - rect.left, 'x');
    const f = dy < 0 ? 0.75 : 1 / 0.75;
    const [lo, hi] = this.clamp(at - (at - min) * f, at + (max - at) * f);
    this.u.setScale('x', { min: lo, max: hi });
  };

  P.setSelected = function (t) {
    this.selectedT = t;
    if (this.u) this.u.redraw(false, false);
    this.updateReadout();
  };

  // Markers, moments and the selected moment, in canvas pixels.
  P.drawOverlay = function (u) {
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    const px = uPlot.pxRatio || 1;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    const { min, max } = u.scales.x;
    const xOf = (t) => u.valToPos(t, 'x', true);
    // The moments a click selects: small ticks along the bottom.
    ctx.fillStyle = '#8c959f';
    for (const m of this.device.moments || []) {
      if (m.t < min || m.t > max) continue;
      ctx.fillRect(Math.round(xOf(m.t)) - px * 0.5, top + height - 5 * px, px, 5 * px);
    }
    const labelled = [];
    let inView = 0;
    for (const m of this.device.markers || []) if (m.t >= min && m.t <= max && m.kind === 'annotation') inView++;
    const annotationTicks = inView > MAX_ANNOTATION_LINES;
    for (const m of this.device.markers || []) {
      if (m.t < min || m.t > max) continue;
      const st = MARKER_STYLE[m.kind] || MARKER_STYLE.annotation;
      const x = Math.round(xOf(m.t)) + 0.5;
      if (m.kind === 'annotation' && annotationTicks) {
        // Many annotations in view: a tick along the top each, not a line across the chart.
        ctx.fillStyle = st.color;
        ctx.fillRect(x - 0.5 * px, top, px, 6 * px);
        continue;
      }
      ctx.strokeStyle = st.color;
      ctx.lineWidth = st.width * px;
      ctx.setLineDash(st.dash.map((d) => d * px));
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      if (st.label) labelled.push([x, m, st]);
    }
    ctx.setLineDash([]);
    if (this.selectedT != null && this.selectedT >= min && this.selectedT <= max) {
      const x = Math.round(xOf(this.selectedT)) + 0.5;
      ctx.strokeStyle = SELECTED;
      ctx.lineWidth = 2 * px;
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      ctx.fillStyle = SELECTED;
      ctx.beginPath();
      ctx.moveTo(x - 5 * px, top);
      ctx.lineTo(x + 5 * px, top);
      ctx.lineTo(x, top + 7 * px);
      ctx.fill();
    }
    ctx.font = '600 ' + 11 * px + 'px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
    ctx.textBaseline = 'top';
    ctx.textAlign = 'left';
    let lastRight = -Infinity;
    for (const [x, m, st] of labelled) {
      const text = m.label || m.kind;
      const w = ctx.measureText(text).width + 6 * px;
      let lx = x + 3 * px;
      if (lx + w > left + width) lx = x - 3 * px - w;
      if (lx < lastRight) continue;
      ctx.fillStyle = 'rgba(255,255,255,0.85)';
      ctx.fillRect(lx, top + 2 * px, w, 15 * px);
      ctx.fillStyle = st.color;
      ctx.fillText(text, lx + 3 * px, top + 4 * px);
      lastRight = lx + w + 4 * px;
    }
    ctx.restore();
  };

  P.makeLegend = function () {
    const el = MT.el;
    this.legendItems = new Map();
    const rows = [];
    for (const id of this.legendOwners) {
      const value = el('span', { class: 'lg-value' });
      const share = el('span', { class: 'lg-share' });
      this.legendItems.set(id, { value, share });
      rows.push(el('span', { class: 'lg-item', 'data-owner': id },
        el('i', { class: 'sw', style: 'background:' + MT.tint(MT.ownerColor(id), 0.35) + ';border-color:' + MT.ownerColor(id) }),
        el('span', { class: 'lg-name', text: this.owners[id].name }), value, share));
    }
    rows.push(el('span', { class: 'lg-item' }, el('i', { class: 'sw line', style: 'border-color:' + ALLOCATED_LINE }), el('span', { class: 'lg-name', text: 'allocated' })));
    rows.push(el('span', { class: 'lg-item' }, el('i', { class: 'sw line', style: 'border-color:' + RESERVED_LINE }), el('span', { class: 'lg-name', text: 'reserved' })));
    const kinds = {};
    for (const m of this.device.markers || []) kinds[m.kind] = (kinds[m.kind] || 0) + 1;
    for (const k of Object.keys(kinds)) {
      const st = MARKER_STYLE[k] || MARKER_STYLE.annotation;
      const name = { peak: 'peak', oom: 'out of memory', snapshot: 'snapshot', annotation: 'annotation' }[k] || k;
      rows.push(el('span', { class: 'lg-item marker' },
        el('i', { class: 'sw mark' + (st.dash.length ? ' dashed' : ''), style: 'border-color:' + st.color }),
        el('span', { class: 'lg-name', text: name + (kinds[k] > 1 ? ' ×' + kinds[k] : '') })));
    }
    this.legend.append(...rows);
  };

  // The readout: at the cursor while it is over the chart, else at the selected moment.
  P.updateReadout = function () {
    if (!this.u) return;
    const idx = this.u.cursor.idx;
    const l = this.levels[this.level];
    let t, alloc, reserved, owners, where;
    if (idx != null && idx >= 0 && idx < l.t.length && this.u.cursor.left >= 0) {
      t = l.t[idx];
      alloc = l.allocated[idx];
      reserved = l.reserved[idx];
      owners = this.isSplit() ? (id) => (l.by_owner[id] ? l.by_owner[id][idx] : 0) : null;
      where = 'cursor';
      const marker = this.markerNear(this.u.cursor.left);
      if (marker) where = marker.label || marker.kind;
    } else if (this.moment) {
      const m = this.moment;
      t = m.t;
      alloc = m.allocated_bytes;
      reserved = m.reserved_bytes;
      owners = m.by_owner ? (id) => m.by_owner[id] || 0 : null;
      where = 'selected: ' + (m.label || 'moment');
    } else {
      return;
    }
    const el = MT.el;
    this.readout.textContent = '';
    this.readout.append(
      el('span', { class: 'ro-time', text: MT.timeLabel(t, this.unit) }),
      el('span', { class: 'ro-where', text: where }),
      el('span', { class: 'ro-num' }, el('span', { class: 'k', text: 'allocated ' }), el('b', { text: MT.bytes(alloc) })),
      el('span', { class: 'ro-num' }, el('span', { class: 'k', text: 'reserved ' }), el('b', { text: MT.bytes(reserved) })));
    for (const [id, item] of this.legendItems) {
      const v = owners ? owners(id) : null;
      item.value.textContent = v == null ? '' : MT.bytes(v);
      item.share.textContent = v == null ? '' : MT.percent(v, alloc);
    }
  };

  P.markerNear = function (cssX) {
    for (const m of this.device.markers || []) {
      const x = this.u.valToPos(m.t, 'x');
      if (Math.abs(x - cssX) <= 3) return m;
    }
    return null;
  };

  P.setMoment = function (m) {
    this.moment = m;
    this.setSelected(m ? m.t : null);
  };

  P.watchSize = function () {
    if (typeof ResizeObserver === 'undefined') return;
    let last = 0;
    this.ro = new ResizeObserver(() => {
      const w = this.plotBox.clientWidth;
      if (this.u && w > 0 && Math.abs(w - last) > 1) {
        last = w;
        this.u.setSize({ width: Math.max(320, w), height: HEIGHT });
      }
    });
    this.ro.observe(this.plotBox);
  };

  P.destroy = function () {
    if (this.ro) this.ro.disconnect();
    if (this.u) this.u.destroy();
  };
})();
