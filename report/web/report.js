// memtrace report: the page. Reads window.MEMTRACE_REPORT (docs/report.md, "The page's data") and
// lays out, per device, memory over time, the live set at the selected moment, the leaks, and the
// segments; the header describes the file. Runs last, after the libraries and the other mt_*.js.
//
// Figures the browser tests compare with the data are written on the elements that show them as
// data-* attributes (data-allocated-bytes, data-total-bytes, ...), and window.MEMTRACE_READY turns
// true once the first device is drawn (window.MEMTRACE_TIMING says when).
(function () {
  'use strict';
  const MT = window.MT;
  const el = MT.el;
  const t0 = performance.now();
  const R = readData();
  const sections = {};
  // How long each part of the first draw took, for MEMTRACE_TIMING.sections.
  function timed(name, f) {
    const a = performance.now();
    const v = f();
    sections[name] = Math.round((sections[name] || 0) + performance.now() - a);
    return v;
  }

  // The data: the JSON element `memtrace report` writes (docs/report.md, "Assembling the page"),
  // parsed with JSON.parse, which is faster than a script literal of the same size; or an object
  // already assigned to window.MEMTRACE_REPORT.
  function readData() {
    if (window.MEMTRACE_REPORT) return window.MEMTRACE_REPORT;
    const e = document.getElementById('memtrace-data');
    if (!e) return null;
    try {
      window.MEMTRACE_REPORT = JSON.parse(e.textContent);
    } catch (err) {
      return { parseError: err.message };
    }
    e.textContent = '';
    return window.MEMTRACE_REPORT;
  }

  function ready(extra) {
    requestAnimationFrame(() => requestAnimationFrame(() => {
      window.MEMTRACE_TIMING = Object.assign({ ready_ms: performance.now(), script_ms: performance.now() - t0, sections }, extra || {});
      window.MEMTRACE_READY = true;
      document.documentElement.dataset.ready = 'true';
    }));
  }

  function fail(message) {
    const main = document.getElementById('report');
    main.textContent = '';
    main.appendChild(el('div', { class: 'notice error', role: 'alert', 'data-error': message }, el('b', { text: 'This report cannot be shown. ' }), message));
    ready({ error: message });
  }

  function main() {
    if (!R || typeof R !== 'object') return fail('It holds no data.');
    if (R.parseError) return fail('Its data does not parse: ' + R.parseError);
    if (R.schema_version !== 1) return fail('Its data is schema version ' + R.schema_version + '; this page reads version 1.');
    if (typeof uPlot === 'undefined' || typeof flamegraph === 'undefined' || typeof d3 === 'undefined') {
      return fail('Its chart libraries are missing: the report was written without its assets (run scripts/setup.sh, rebuild, and write it again).');
    }
    const h = R.header || {};
    if (h.last != null && h.first != null) MT.setSpan(h.last - h.first);
    timed('header', renderHeader);
    const devices = R.devices || [];
    const nav = document.getElementById('devices');
    const main = document.getElementById('report');
    if (!devices.length) {
      main.appendChild(el('p', { class: 'notice', text: 'This file records no device memory.' }));
      return ready();
    }
    let current = null;
    const tabs = devices.map((d, i) => el('button', {
      type: 'button', class: 'tab', role: 'tab', 'data-device': d.device, 'aria-selected': 'false',
      text: d.title || (d.device < 0 ? 'pinned host memory' : 'device ' + d.device),
      onclick: () => show(i),
    }));
    if (devices.length > 1) nav.append(...tabs);
    else nav.hidden = true;
    function show(i) {
      if (current) current.destroy();
      tabs.forEach((t, k) => t.setAttribute('aria-selected', k === i ? 'true' : 'false'));
      main.textContent = '';
      current = new DeviceView(main, devices[i]);
    }
    const first = Math.max(0, devices.findIndex((d) => d.device >= 0));
    show(first);
    ready({ device: devices[first].device });
  }

  function kv(k, v, attrs) {
    return el('div', Object.assign({ class: 'kv', 'data-k': k }, attrs || {}), el('dt', { text: k }), el('dd', null, v));
  }

  function renderHeader() {
    const h = R.header || {};
    const exe = h.exe || '(unknown program)';
    const prog = exe.split(/\s+/).slice(0, 2).map((w) => w.split('/').pop()).join(' ');
    document.getElementById('title').textContent = prog;
    document.title = 'memtrace report · ' + prog + (h.host ? ' on ' + h.host : '');
    const box = document.getElementById('header');
    box.dataset.section = 'header';
    const span = h.last != null && h.first != null ? h.last - h.first : null;
    const isUs = h.x_unit !== 'entry';
    let started = null;
    if (isUs && h.t0_us > 1e14) {
      const d = new Date((h.t0_us + (h.first || 0)) / 1000);
      started = d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
    }
    const history = h.truncated
      ? el('span', { class: 'warn', text: 'truncated: the oldest ' + (h.entries_dropped ? MT.count(h.entries_dropped) + ' ' : '') + 'entries were dropped, so it starts late' })
      : el('span', { text: 'complete' });
    const dl = el('dl', { class: 'meta' },
      kv('program', el('code', { text: exe })),
      kv('pid', h.pid != null ? String(h.pid) : '–'),
      kv('rank', h.rank != null && h.rank !== '' ? String(h.rank) : '–'),
      kv('host', h.host || '–'),
      kv('written because', h.reason || '–'),
      kv('history', span == null ? '–' : isUs ? MT.duration(span) + (started ? ', from ' + started : '') : MT.count(span) + ' entries (no times recorded)'),
      kv('entries', history, { 'data-truncated': h.truncated ? 'true' : 'false' }),
      kv('recorded by', h.producer === 'pytorch' ? 'PyTorch (its memory snapshot)' : 'memtrace'),
      kv('report by', 'memtrace' + (h.memtrace_version ? ' ' + h.memtrace_version : '')),
      kv('file', el('code', { text: h.file || '–' })));
    box.appendChild(dl);
    const extra = el('div', { class: 'meta-extra' });
    if (h.parts && h.parts.length) {
      extra.appendChild(el('div', { class: 'parts' },
        el('h3', { text: 'A merged file: its parts' }),
        el('table', { class: 'grid compact' },
          el('thead', null, el('tr', null, el('th', { text: 'owner' }), el('th', { text: 'recorded by' }), el('th', { class: 'num', text: 'live at the end' }))),
          el('tbody', null, h.parts.map((p) => el('tr', null, el('td', { text: p.owner }),
            el('td', { text: p.source === 'pytorch' ? 'PyTorch' : 'memtrace', title: p.from || '' }),
            el('td', { class: 'num', text: MT.bytes(p.live_bytes), title: MT.exactBytes(p.live_bytes) })))))));
    }
    if (h.settings && h.settings.length) {
      extra.appendChild(el('details', { class: 'settings' },
        el('summary', { text: 'allocator settings (' + h.settings.length + ')' }),
        el('table', { class: 'grid compact' }, el('tbody', null,
          h.settings.map(([k, v]) => el('tr', null, el('td', null, el('code', { text: k })), el('td', null, el('code', { text: String(v) }))))))));
    }
    if (extra.childNodes.length) box.appendChild(extra);
  }

  function momentName(m) {
    if (m.label === 'peak' || m.label === 'end') return 'the ' + m.label;
    return m.label || MT.timeLabel(m.t, R.header.x_unit);
  }

  function card(label, value, attrs, sub) {
    return el('div', Object.assign({ class: 'card' }, attrs || {}),
      el('div', { class: 'card-k', text: label }), el('div', { class: 'card-v', text: value }), sub ? el('div', { class: 'card-sub', text: sub }) : null);
  }

  function section(kind, title, sub) {
    const s = el('section', { class: 'panel', 'data-section': kind });
    s.appendChild(el('div', { class: 'panel-head' }, el('h2', { text: title }), sub || null));
    return s;
  }

  // One device: its cards and four sections.
  function DeviceView(parent, dev) {
    this.dev = dev;
    const unit = R.header.x_unit;
    const root = (this.root = el('div', { class: 'device', 'data-device': dev.device }));
    parent.appendChild(root);
    const peak = dev.peak || {};
    const end = dev.end || {};
    const leaks = dev.leaks || { bytes: 0, count: 0 };
    const ooms = dev.ooms || [];
    root.appendChild(el('div', { class: 'cards' },
      card('peak allocated', MT.bytes(peak.allocated_bytes), { 'data-peak-allocated-bytes': peak.allocated_bytes }, peak.t != null ? 'at ' + MT.timeLabel(peak.t, unit) : null),
      card('reserved at the peak', MT.bytes(peak.reserved_bytes), { 'data-peak-reserved-bytes': peak.reserved_bytes }),
      card('allocated at the end', MT.bytes(end.allocated_bytes), { 'data-end-allocated-bytes': end.allocated_bytes }, 'reserved ' + MT.bytes(end.reserved_bytes)),
      card('still allocated at the end', MT.bytes(leaks.bytes), { 'data-leak-bytes': leaks.bytes }, MT.count(leaks.count) + ' allocations'),
      card('out of memory', String(ooms.length), { 'data-ooms': ooms.length, class: 'card' + (ooms.length ? ' bad' : '') },
        ooms.length ? 'first at ' + MT.timeLabel(ooms[0].t, unit) : 'none')));

    const tl = section('timeline', 'Memory over time');
    root.appendChild(tl);
    this.timelineBox = el('div', { class: 'timeline-box' });
    const groups = dev.stack_groups || [];
    const splits = [['owner', 'Split by owner']];
    if (groups.length && (dev.series || []).some((l) => l.by_stack)) splits.push(['stack', 'Split by top stacks']);
    // A file with ranges (NVTX, record_function; docs/ranges.md) splits by range stack too.
    if ((R.ranges || []).length && (dev.series || []).some((l) => l.by_range)) splits.push(['range', 'Split by range']);
    if (splits.length > 1) {
      // The split by owner, by the largest stacks at the peak or by range: the same chart over other groups.
      this.splitButtons = splits.map(([k, label]) => el('button', {
        type: 'button', class: 'seg', 'data-split-by': k, 'aria-pressed': k === 'owner' ? 'true' : 'false', text: label,
        onclick: () => this.setSplitBy(k),
      }));
      tl.appendChild(el('div', { class: 'toolbar' }, el('div', { class: 'segmented', role: 'group', 'aria-label': 'split by' }, this.splitButtons)));
    }
    tl.appendChild(this.timelineBox);
    this.splitBy = 'owner';
    this.timeline = timed('timeline', () => this.makeTimeline());

    this.momentSection = section('moment', 'What was live');
    root.appendChild(this.momentSection);
    timed('moment', () => this.buildMoments());

    const lk = section('leaks', 'Still allocated at the end');
    root.appendChild(lk);
    timed('leaks', () => this.buildLeaks(lk, leaks));

    const sg = section('segments', 'Segments and fragmentation');
    root.appendChild(sg);
    if (ooms.length) sg.appendChild(this.oomTable(ooms));
    this.segments = timed('segments', () => new MT.SegmentsView(sg, R, dev));
  }

  const D = DeviceView.prototype;

  D.buildMoments = function () {
    const dev = this.dev;
    const s = this.momentSection;
    const moments = dev.moments || [];
    this.order = moments.map((m, i) => i).sort((a, b) => moments[a].t - moments[b].t);
    this.orderT = this.order.map((i) => moments[i].t);
    if (!moments.length) {
      s.appendChild(el('p', { class: 'empty', text: 'No moment of this history was kept.' }));
      return;
    }
    const unit = R.header.x_unit;
    this.momentSelect = el('select', { class: 'moment-select', 'aria-label': 'moment' },
      this.order.map((i) => {
        const m = moments[i];
        return el('option', { value: i, text: MT.timeLabel(m.t, unit) + (m.label ? ' — ' + m.label : '') + ' · ' + MT.bytes(m.allocated_bytes) });
      }));
    this.momentSelect.addEventListener('change', () => this.selectMoment(Number(this.momentSelect.value)));
    const step = (d) => {
      const k = this.order.indexOf(this.momentIndex) + d;
      if (k >= 0 && k < this.order.length) this.selectMoment(this.order[k]);
    };
    this.momentInfo = el('div', { class: 'moment-info' });
    this.ownerBar = el('div', { class: 'owner-bar' });
    s.append(
      el('div', { class: 'toolbar' },
        el('button', { type: 'button', class: 'btn', text: '◀', title: 'previous moment', 'aria-label': 'previous moment', onclick: () => step(-1) }),
        this.momentSelect,
        el('button', { type: 'button', class: 'btn', text: '▶', title: 'next moment', 'aria-label': 'next moment', onclick: () => step(1) }),
        el('button', { type: 'button', class: 'btn', text: 'Peak', onclick: () => this.selectMoment(this.peakMoment()) }),
        el('span', { class: 'hint', text: 'or click the chart above' })),
      this.momentInfo, this.ownerBar);
    this.live = new MT.LiveView(s, R, { emptyText: 'Nothing was allocated at this moment.', topTitle: 'Ten largest allocations at this moment' });
    this.selectMoment(this.peakMoment());
  };

  D.peakMoment = function () {
    const moments = this.dev.moments;
    const peak = this.dev.peak || {};
    let i = moments.findIndex((m) => m.entry === peak.entry && peak.entry != null);
    if (i < 0) i = moments.findIndex((m) => m.label === 'peak');
    if (i < 0) i = this.nearest(peak.t != null ? peak.t : 0);
    return i;
  };

  D.nearest = function (t) {
    const a = this.orderT;
    const k = MT.lowerIndex(a, t);
    const best = k + 1 < a.length && Math.abs(a[k + 1] - t) < Math.abs(a[k] - t) ? k + 1 : k;
    return this.order[best];
  };

  D.pickTime = function (t) {
    if (this.order && this.order.length) this.selectMoment(this.nearest(t));
  };

  D.selectMoment = function (i) {
    const m = this.dev.moments[i];
    if (!m) return;
    this.momentIndex = i;
    const s = this.momentSection;
    s.dataset.moment = i;
    s.dataset.momentT = m.t;
    s.dataset.allocatedBytes = m.allocated_bytes;
    s.dataset.reservedBytes = m.reserved_bytes;
    this.momentSelect.value = String(i);
    const unit = R.header.x_unit;
    s.querySelector('h2').textContent = 'What was live at ' + momentName(m);
    this.momentInfo.textContent = '';
    this.momentInfo.append(
      el('span', { class: 'ro-time', text: MT.timeLabel(m.t, unit) }),
      el('span', { class: 'ro-num' }, el('span', { class: 'k', text: 'allocated ' }), el('b', { text: MT.bytes(m.allocated_bytes), title: MT.exactBytes(m.allocated_bytes) })),
      el('span', { class: 'ro-num' }, el('span', { class: 'k', text: 'reserved ' }), el('b', { text: MT.bytes(m.reserved_bytes), title: MT.exactBytes(m.reserved_bytes) })),
      m.entry != null && unit !== 'entry' ? el('span', { class: 'muted', text: 'entry ' + MT.count(m.entry) }) : null);
    this.renderOwnerBar(m.by_owner || [], m.allocated_bytes);
    this.live.show({ live: m.live, top: m.top, rootName: 'live at ' + momentName(m) });
    if (this.timeline) this.timeline.setMoment(this.splitMoment(m));
  };

  // The chart split by owner (the data as it is), or by stack group or range group: the same data
  // with the groups' series and names in the owners' place.
  D.makeTimeline = function () {
    const dev = this.dev;
    let report = R;
    let device = dev;
    if (this.splitBy === 'stack' || this.splitBy === 'range') {
      const stack = this.splitBy === 'stack';
      const names = stack ? (dev.stack_groups || []).map((g) => g.label).concat(['other stacks']) : R.ranges;
      report = Object.assign({}, R, { owners: names, group_label: this.splitBy });
      device = Object.assign({}, dev, {
        series: dev.series.map((l) => Object.assign({}, l, { by_owner: (stack ? l.by_stack : l.by_range) || null })),
        moments: dev.moments.map((m) => this.splitMoment(m)),
      });
    }
    return new MT.Timeline(this.timelineBox, report, device, (t) => this.pickTime(t));
  };

  // A moment with the current split's bytes in the owners' place.
  D.splitMoment = function (m) {
    if (this.splitBy === 'stack') return Object.assign({}, m, { by_owner: m.by_stack || [] });
    if (this.splitBy === 'range') return Object.assign({}, m, { by_owner: m.by_range || [] });
    return m;
  };

  D.setSplitBy = function (k) {
    if (k === this.splitBy) return;
    this.splitBy = k;
    for (const b of this.splitButtons) b.setAttribute('aria-pressed', b.dataset.splitBy === k ? 'true' : 'false');
    if (this.timeline) this.timeline.destroy();
    this.timelineBox.textContent = '';
    this.timelineBox.dataset.splitBy = k;
    this.timeline = this.makeTimeline();
    const m = this.dev.moments[this.momentIndex];
    if (m) this.timeline.setMoment(this.splitMoment(m));
  };

  D.renderOwnerBar = function (byOwner, total) {
    const bar = this.ownerBar;
    bar.textContent = '';
    const parts = byOwner.map((b, id) => [id, b]).filter(([, b]) => b > 0).sort((a, b) => b[1] - a[1]);
    if (!parts.length || !total) return;
    bar.appendChild(el('div', { class: 'ob-track' }, parts.map(([id, b]) => el('span', {
      class: 'ob-part', 'data-owner': id, 'data-bytes': b, title: MT.ownerName(R, id) + ': ' + MT.bytes(b),
      style: 'width:' + ((100 * b) / total).toFixed(3) + '%;background:' + MT.tint(MT.ownerColor(id), 0.2),
    }))));
    bar.appendChild(el('div', { class: 'ob-legend' }, parts.map(([id, b]) => el('span', { class: 'lg-item' },
      el('i', { class: 'sw', style: 'background:' + MT.tint(MT.ownerColor(id), 0.2) }),
      el('span', { class: 'lg-name', text: MT.ownerName(R, id) }), el('span', { class: 'lg-value', text: MT.bytes(b) }),
      el('span', { class: 'lg-share', text: MT.percent(b, total) })))));
  };

  D.buildLeaks = function (s, leaks) {
    s.dataset.leakBytes = leaks.bytes || 0;
    s.dataset.leakCount = leaks.count || 0;
    if (!leaks.bytes) {
      s.appendChild(el('p', { class: 'empty good', text: 'Everything allocated was freed by the end of the history.' }));
      return;
    }
    const rows = (leaks.by_owner || []).slice().sort((a, b) => b[1] - a[1]);
    s.appendChild(el('p', { class: 'lead' }, el('b', { text: MT.bytes(leaks.bytes) }), ' in ' + MT.count(leaks.count) + ' allocations was still allocated when the history ends.'));
    if (rows.length) {
      s.appendChild(el('table', { class: 'grid compact owners' },
        el('thead', null, el('tr', null, el('th', { text: 'owner' }), el('th', { class: 'num', text: 'bytes' }), el('th', { class: 'num', text: 'share' }), el('th', { class: 'num', text: 'allocations' }))),
        el('tbody', null, rows.map(([id, b, n]) => el('tr', { 'data-owner': id, 'data-bytes': b },
          el('td', null, el('i', { class: 'sw', style: 'background:' + MT.tint(MT.ownerColor(id), 0.2) }), ' ' + MT.ownerName(R, id)),
          el('td', { class: 'num', text: MT.bytes(b), title: MT.exactBytes(b) }), el('td', { class: 'num', text: MT.percent(b, leaks.bytes) }),
          el('td', { class: 'num', text: MT.count(n) }))))));
    }
    this.leakView = new MT.LiveView(s, R, { emptyText: 'No stack holds these bytes.', topTitle: 'Ten largest allocations still live at the end' });
    this.leakView.show({ live: leaks.live, top: leaks.top, rootName: 'still allocated at the end' });
  };

  D.oomTable = function (ooms) {
    const unit = R.header.x_unit;
    return el('div', { class: 'ooms' }, el('h3', { text: 'Out-of-memory errors' }),
      el('div', { class: 'table-wrap' }, el('table', { class: 'grid compact' },
        el('thead', null, el('tr', null, el('th', { text: 'at' }), el('th', { class: 'num', text: 'requested' }), el('th', { class: 'num', text: 'free in segments' }),
          el('th', { class: 'num', text: 'largest free block' }), el('th', { text: 'verdict' }), el('th', { text: '' }))),
        el('tbody', null, ooms.map((o, k) => el('tr', { 'data-oom': k },
          el('td', { text: MT.timeLabel(o.t, unit) }), el('td', { class: 'num', text: MT.bytes(o.requested_bytes) }),
          el('td', { class: 'num', text: MT.bytes(o.free_in_segments_bytes) }), el('td', { class: 'num', text: MT.bytes(o.largest_free_block_bytes) }),
          el('td', { text: o.verdict || '' }),
          el('td', null, el('button', { type: 'button', class: 'btn small', text: 'Inspect', onclick: () => this.inspectOom(o) }))))))));
  };

  D.inspectOom = function (o) {
    this.pickTime(o.t);
    const layouts = this.dev.layouts || [];
    const li = layouts.findIndex((l) => l.entry === o.entry);
    if (li >= 0 && this.segments) this.segments.select(li);
    this.momentSection.scrollIntoView({ behavior: 'smooth', block: 'start' });
  };

  D.destroy = function () {
    for (const v of [this.timeline, this.live, this.leakView, this.segments]) if (v) v.destroy();
  };

  try {
    main();
  } catch (e) {
    fail('The page failed while drawing: ' + (e && e.message ? e.message : String(e)));
    throw e;
  }
})();
