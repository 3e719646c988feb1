// memtrace report: the segments at the peak and at each out-of-memory, one bar per segment with its
// live blocks and the free holes between them (docs/report.md, "Layouts").
//
// A layout can hold 400 segments and tens of thousands of blocks, so the bars are drawn on one
// canvas the size of the visible window, and only the rows in view are drawn as the list scrolls.
(function () {
  'use strict';
  const MT = (window.MT = window.MT || {});

  const ROW = 18;
  const BAR = 12;
  const LABEL_W = 92;
  const MAX_VIEW = 460;
  const COLORS = {
    block: '#4e79a7',
    block2: '#6f93bd',
    free: '#f6f8fa',
    outline: '#d0d7de',
    largest: '#f4b183',
    largestEdge: '#bc4c00',
    label: '#59636e',
  };

  // Free holes of one segment as [offset, size, ...], and its largest.
  function holes(seg) {
    const out = [];
    const b = seg.blocks || [];
    let pos = 0;
    for (let i = 0; i + 1 < b.length; i += 2) {
      if (b[i] > pos) out.push(pos, b[i] - pos);
      pos = Math.max(pos, b[i] + b[i + 1]);
    }
    if (seg.size > pos) out.push(pos, seg.size - pos);
    return out;
  }

  MT.layoutFigures = function (layout) {
    let reserved = 0;
    let allocated = 0;
    let largest = 0;
    let largestAt = null;
    (layout.segments || []).forEach((s, si) => {
      reserved += s.size;
      const b = s.blocks || [];
      for (let i = 1; i < b.length; i += 2) allocated += b[i];
      const h = holes(s);
      for (let i = 0; i + 1 < h.length; i += 2) {
        if (h[i + 1] > largest) {
          largest = h[i + 1];
          largestAt = [si, h[i]];
        }
      }
    });
    return { reserved, allocated, largest, largestAt };
  };

  MT.SegmentsView = function (parent, report, device) {
    this.report = report;
    this.device = device;
    this.layouts = device.layouts || [];
    this.toScale = false;
    this.current = -1;
    this.build(parent);
  };

  const P = MT.SegmentsView.prototype;

  P.build = function (parent) {
    const el = MT.el;
    this.root = el('div', { class: 'segments' });
    parent.appendChild(this.root);
    if (!this.layouts.length) {
      this.root.appendChild(el('p', { class: 'empty', text: 'No segment layout in this file (its segments were not recorded).' }));
      return;
    }
    this.tabs = this.layouts.map((l, i) => el('button', {
      type: 'button', class: 'seg', 'aria-pressed': 'false', 'data-layout': i,
      text: l.label || 'layout ' + (i + 1), onclick: () => this.select(i),
    }));
    this.scaleBtns = [['full', 'Each bar full width'], ['scale', 'Bars to scale']].map(([k, label]) => el('button', {
      type: 'button', class: 'seg', 'data-scale': k, 'aria-pressed': (k === 'scale') === this.toScale ? 'true' : 'false', text: label,
      onclick: () => this.setScale(k === 'scale'),
    }));
    this.summary = el('div', { class: 'seg-summary' });
    this.canvas = el('canvas', { class: 'seg-canvas' });
    this.spacer = el('div', { class: 'seg-spacer' });
    this.scroller = el('div', { class: 'seg-scroll' }, this.canvas, this.spacer);
    this.tip = el('div', { class: 'tip', hidden: true });
    this.root.append(
      el('div', { class: 'toolbar' },
        el('div', { class: 'segmented', role: 'group', 'aria-label': 'layout' }, this.tabs),
        el('div', { class: 'segmented', role: 'group', 'aria-label': 'bar scale' }, this.scaleBtns)),
      this.summary,
      el('div', { class: 'seg-legend' },
        el('span', { class: 'lg-item' }, el('i', { class: 'sw', style: 'background:' + COLORS.block }), 'live block'),
        el('span', { class: 'lg-item' }, el('i', { class: 'sw', style: 'background:' + COLORS.free + ';border-color:' + COLORS.outline }), 'free in the segment'),
        el('span', { class: 'lg-item' }, el('i', { class: 'sw', style: 'background:' + COLORS.largest + ';border-color:' + COLORS.largestEdge }), 'largest free block')),
      el('div', { class: 'seg-view' }, this.scroller, this.tip));
    this.scroller.addEventListener('scroll', () => this.draw(), { passive: true });
    this.canvas.addEventListener('mousemove', (e) => this.hover(e));
    this.canvas.addEventListener('mouseleave', () => { this.tip.hidden = true; });
    if (typeof ResizeObserver !== 'undefined') {
      this.ro = new ResizeObserver(() => this.layoutCanvas());
      this.ro.observe(this.scroller);
    }
    this.select(0);
  };

  P.destroy = function () {
    if (this.ro) this.ro.disconnect();
  };

  P.setScale = function (on) {
    this.toScale = on;
    for (const b of this.scaleBtns) b.setAttribute('aria-pressed', (b.dataset.scale === 'scale') === on ? 'true' : 'false');
    this.draw();
  };

  P.select = function (i) {
    this.current = i;
    for (const b of this.tabs) b.setAttribute('aria-pressed', Number(b.dataset.layout) === i ? 'true' : 'false');
    const l = this.layouts[i];
    this.figures = MT.layoutFigures(l);
    this.maxSize = Math.max(1, ...l.segments.map((s) => s.size));
    this.holeCache = new Map();
    this.renderSummary(l);
    this.scroller.scrollTop = 0;
    this.layoutCanvas();
  };

  // The OOM this layout was taken at, if any: same entry, else same time.
  P.oomFor = function (l) {
    const ooms = this.device.ooms || [];
    return ooms.find((o) => o.entry === l.entry) || ooms.find((o) => o.t === l.t) || null;
  };

  P.renderSummary = function (l) {
    const el = MT.el;
    const f = this.figures;
    const r = this.root;
    r.dataset.layout = this.current;
    r.dataset.segments = l.segments.length;
    r.dataset.segmentsOmitted = l.segments_omitted || 0;
    r.dataset.reservedBytes = l.reserved_bytes;
    r.dataset.allocatedBytes = l.allocated_bytes;
    r.dataset.drawnReservedBytes = f.reserved;
    r.dataset.drawnAllocatedBytes = f.allocated;
    r.dataset.largestFreeBlockBytes = f.largest;
    const fig = (k, v, title) => el('div', { class: 'fig' }, el('div', { class: 'fig-k', text: k }), el('div', { class: 'fig-v', text: v, title: title || null }));
    const omitted = l.segments_omitted ? ' (+' + MT.count(l.segments_omitted) + ' smaller, not drawn)' : '';
    this.summary.textContent = '';
    const figs = el('div', { class: 'figs' },
      fig('at', MT.timeLabel(l.t, this.report.header.x_unit)),
      fig('reserved', MT.bytes(l.reserved_bytes), MT.exactBytes(l.reserved_bytes)),
      fig('allocated', MT.bytes(l.allocated_bytes), MT.exactBytes(l.allocated_bytes)),
      fig('free in segments', MT.bytes(l.reserved_bytes - l.allocated_bytes)),
      fig('largest free block', MT.bytes(l.largest_free_block_bytes != null ? l.largest_free_block_bytes : f.largest)),
      fig('segments', MT.count(l.segments.length) + omitted));
    this.summary.append(figs);
    const oom = this.oomFor(l);
    if (oom || l.verdict) {
      const box = el('div', { class: 'verdict' + (oom && oom.fits_without_fragmentation ? ' frag' : '') });
      box.append(el('div', { class: 'verdict-title', text: l.verdict || oom.verdict || '' }));
      if (oom) {
        box.append(el('div', { class: 'figs small' },
          fig('requested', MT.bytes(oom.requested_bytes), MT.exactBytes(oom.requested_bytes)),
          fig('device free', oom.device_free_bytes == null ? 'not recorded' : MT.bytes(oom.device_free_bytes)),
          fig('free in segments', MT.bytes(oom.free_in_segments_bytes)),
          fig('largest free block', MT.bytes(oom.largest_free_block_bytes)),
          fig('would fit unfragmented', oom.fits_without_fragmentation ? 'yes' : 'no')));
        if (oom.stack != null) box.append(el('div', { class: 'oom-stack' }, el('span', { class: 'muted', text: 'request: ' }), MT.stackCell(this.report, oom.stack, 'short')));
      }
      this.summary.append(box);
    }
  };

  P.layoutCanvas = function () {
    const l = this.layouts[this.current];
    if (!l) return;
    const total = l.segments.length * ROW + 4;
    const view = Math.min(total, MAX_VIEW);
    const w = this.scroller.clientWidth || 900;
    const dpr = window.devicePixelRatio || 1;
    this.cssW = w;
    this.cssH = view;
    this.canvas.style.width = w + 'px';
    this.canvas.style.height = view + 'px';
    this.canvas.width = Math.round(w * dpr);
    this.canvas.height = Math.round(view * dpr);
    this.spacer.style.height = total - view + 'px';
    this.scroller.style.height = view + 'px';
    this.draw();
  };

  P.holesOf = function (si) {
    let h = this.holeCache.get(si);
    if (!h) this.holeCache.set(si, (h = holes(this.layouts[this.current].segments[si])));
    return h;
  };

  P.barGeometry = function (seg) {
    const full = Math.max(40, this.cssW - LABEL_W - 12);
    return { x0: LABEL_W, w: this.toScale ? Math.max(2, (full * seg.size) / this.maxSize) : full };
  };

  P.draw = function () {
    const l = this.layouts[this.current];
    if (!l || !this.cssW) return;
    const ctx = this.canvas.getContext('2d');
    const dpr = window.devicePixelRatio || 1;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.cssW, this.cssH);
    const top = this.scroller.scrollTop;
    const first = Math.max(0, Math.floor(top / ROW));
    const last = Math.min(l.segments.length - 1, Math.ceil((top + this.cssH) / ROW));
    ctx.font = '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    const largestAt = this.figures.largestAt;
    let drawn = 0;
    for (let si = first; si <= last; si++) {
      const seg = l.segments[si];
      const y = si * ROW - top + 3;
      const { x0, w } = this.barGeometry(seg);
      const k = w / seg.size;
      ctx.fillStyle = COLORS.label;
      ctx.fillText(MT.bytes(seg.size), LABEL_W - 8, y + BAR / 2);
      ctx.fillStyle = COLORS.free;
      ctx.fillRect(x0, y, w, BAR);
      const b = seg.blocks || [];
      for (let i = 0; i + 1 < b.length; i += 2) {
        ctx.fillStyle = (i >> 1) & 1 ? COLORS.block2 : COLORS.block;
        ctx.fillRect(x0 + b[i] * k, y, Math.max(0.6, b[i + 1] * k), BAR);
      }
      if (largestAt && largestAt[0] === si) {
        const h = this.holesOf(si);
        for (let i = 0; i + 1 < h.length; i += 2) {
          if (h[i] !== largestAt[1]) continue;
          ctx.fillStyle = COLORS.largest;
          ctx.fillRect(x0 + h[i] * k, y, Math.max(1, h[i + 1] * k), BAR);
          ctx.strokeStyle = COLORS.largestEdge;
          ctx.lineWidth = 1.5;
          ctx.strokeRect(x0 + h[i] * k + 0.75, y + 0.75, Math.max(1, h[i + 1] * k) - 1.5, BAR - 1.5);
        }
      }
      ctx.strokeStyle = COLORS.outline;
      ctx.lineWidth = 1;
      ctx.strokeRect(x0 + 0.5, y + 0.5, w - 1, BAR - 1);
      drawn++;
    }
    this.root.dataset.rowsDrawn = drawn;
  };

  P.hover = function (e) {
    const l = this.layouts[this.current];
    const rect = this.canvas.getBoundingClientRect();
    const x = e.clientX - rect.left;
    const y = e.clientY - rect.top + this.scroller.scrollTop;
    const si = Math.floor(y / ROW);
    const seg = l.segments[si];
    const el = MT.el;
    if (!seg) {
      this.tip.hidden = true;
      return;
    }
    const { x0, w } = this.barGeometry(seg);
    if (x < x0 || x > x0 + w) {
      this.tip.hidden = true;
      return;
    }
    const off = ((x - x0) / w) * seg.size;
    const b = seg.blocks || [];
    let what = null;
    for (let i = 0; i + 1 < b.length; i += 2) {
      if (off >= b[i] && off < b[i] + b[i + 1]) what = ['live block', b[i], b[i + 1]];
    }
    if (!what) {
      const h = this.holesOf(si);
      for (let i = 0; i + 1 < h.length; i += 2) if (off >= h[i] && off < h[i] + h[i + 1]) what = ['free', h[i], h[i + 1]];
    }
    let live = 0;
    for (let i = 1; i < b.length; i += 2) live += b[i];
    this.tip.textContent = '';
    this.tip.append(
      el('div', null, el('b', { text: 'segment ' }), el('code', { text: seg.addr }), ' · ' + MT.bytes(seg.size)),
      el('div', { class: 'muted', text: MT.count(b.length / 2) + ' live blocks, ' + MT.bytes(live) + ' (' + MT.percent(live, seg.size) + ') in use' }),
      what ? el('div', null, el('b', { text: what[0] + ': ' }), MT.bytes(what[2]) + ' at +0x' + Math.round(what[1]).toString(16)) : null);
    this.tip.hidden = false;
    const vr = this.scroller.getBoundingClientRect();
    let tx = e.clientX - vr.left + 14;
    if (tx + 280 > vr.width) tx = Math.max(0, e.clientX - vr.left - 290);
    this.tip.style.left = tx + 'px';
    this.tip.style.top = e.clientY - vr.top + 14 + 'px';
  };
})();
