// memtrace report: a live set (what was allocated at one moment, or still allocated at the end) as
// an icicle of stacks weighted by bytes, drawn by d3-flame-graph, and its largest allocations.
//
// The data gives, per moment, only the tree nodes that some allocation's stack ends at and the
// bytes there (docs/report.md, "Moments"); the hierarchy is built here, per moment and per stack
// filter, from those leaves up, touching no node that holds no bytes at that moment. The flame
// graph draws only the frames at least MIN_FRAME_PX wide, so its element count is bounded by the
// width of the page, not by the tree's 50,000 nodes.
(function () {
  'use strict';
  const MT = (window.MT = window.MT || {});

  const MIN_FRAME_PX = 1.5;
  const CELL = 18;
  const KINDS = [['short', 'Readable frames'], ['all', 'All frames']];

  // The live set as nested {name, value, children} (value: the bytes under that node), biggest first.
  MT.buildHierarchy = function (report, kind, pairs, rootName) {
    const tree = report.trees && report.trees[kind];
    const root = { name: rootName, value: 0, children: [], node: 0 };
    if (!tree || !pairs) return { root, nodes: 1 };
    const parent = tree.parent;
    const names = tree.name;
    const strings = report.strings;
    const objs = new Array(parent.length);
    objs[0] = root;
    let nodes = 1;
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      const b = pairs[i + 1];
      let n = pairs[i];
      if (!(b > 0) || !(n >= 0 && n < parent.length)) continue;
      let child = null;
      for (let guard = 0; n >= 0 && guard < parent.length; guard++) {
        let o = objs[n];
        const made = !o;
        if (made) {
          o = objs[n] = { name: strings[names[n]] || '?', value: 0, children: [], node: n };
          nodes++;
        }
        o.value += b;
        if (child) o.children.push(child);
        child = made ? o : null;
        if (n === 0) break;
        n = parent[n];
      }
    }
    const stack = [root];
    while (stack.length) {
      const o = stack.pop();
      if (o.children.length > 1) o.children.sort((a, b) => b.value - a.value);
      for (const c of o.children) stack.push(c);
    }
    return { root, nodes };
  };

  function hash(s) {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
    return (h >>> 0) / 4294967296;
  }

  // Calm colours by frame kind, lightness varied by name so neighbours stay apart.
  function frameColor(d) {
    if (d.highlight) return '#d2a8ff';
    if (!d.parent) return '#afb8c1';
    const name = d.data.name;
    const v = hash(name);
    switch (MT.frameKind(name)) {
      case 'python': return 'hsl(212,' + Math.round(45 + 15 * v) + '%,' + Math.round(68 + 12 * v) + '%)';
      case 'pylib': return 'hsl(190,' + Math.round(22 + 12 * v) + '%,' + Math.round(72 + 10 * v) + '%)';
      case 'meta': return '#d0d7de';
      default: return 'hsl(' + Math.round(28 + 14 * v) + ',' + Math.round(55 + 20 * v) + '%,' + Math.round(70 + 10 * v) + '%)';
    }
  }

  MT.LiveView = function (parent, report, opts) {
    this.report = report;
    this.opts = opts || {};
    this.kind = 'short';
    this.state = null;
    this.build(parent);
  };

  const P = MT.LiveView.prototype;

  P.build = function (parent) {
    const el = MT.el;
    this.root = el('div', { class: 'liveview', 'data-kind': this.kind });
    this.kindButtons = KINDS.map(([k, label]) => el('button', {
      type: 'button', class: 'seg', 'data-kind': k, 'aria-pressed': k === this.kind ? 'true' : 'false', text: label,
      onclick: () => this.setKind(k),
    }));
    this.search = el('input', { type: 'search', class: 'search', placeholder: 'Highlight frames…', 'aria-label': 'highlight frames containing' });
    this.search.addEventListener('input', () => this.applySearch());
    this.resetBtn = el('button', { type: 'button', class: 'btn', text: 'Reset zoom', onclick: () => this.fg && this.fg.resetZoom() });
    this.details = el('div', { class: 'lv-details' });
    this.flameBox = el('div', { class: 'lv-flame' });
    this.topBox = el('div', { class: 'lv-top' });
    this.root.append(
      el('div', { class: 'toolbar' },
        el('div', { class: 'segmented', role: 'group', 'aria-label': 'stack frames' }, this.kindButtons),
        this.search, this.resetBtn),
      this.details, this.flameBox, this.topBox);
    parent.appendChild(this.root);
    this.watchSize();
  };

  // state: {live: {short, all}, top: [...], rootName, caption}
  P.show = function (state) {
    this.state = state;
    this.render();
  };

  P.setKind = function (k) {
    if (k === this.kind) return;
    this.kind = k;
    this.root.dataset.kind = k;
    for (const b of this.kindButtons) b.setAttribute('aria-pressed', b.dataset.kind === k ? 'true' : 'false');
    this.render();
  };

  P.render = function () {
    const s = this.state;
    if (!s) return;
    const pairs = s.live && s.live[this.kind];
    const { root, nodes } = MT.buildHierarchy(this.report, this.kind, pairs, s.rootName || 'all');
    this.total = root.value;
    this.root.dataset.totalBytes = root.value;
    this.root.dataset.nodes = nodes;
    this.renderFlame(root);
    this.renderTop(s.top || []);
    this.showDetails(null);
  };

  P.renderFlame = function (root) {
    if (this.fg) this.fg.destroy();
    this.fg = null;
    this.flameBox.textContent = '';
    if (!root.value) {
      this.flameBox.appendChild(MT.el('p', { class: 'empty', text: this.opts.emptyText || 'Nothing was live.' }));
      return;
    }
    const width = Math.max(320, this.flameBox.clientWidth || 900);
    this.drawnWidth = width;
    const total = root.value;
    const label = (d) => d.data.name + '\n' + MT.bytes(d.value) + ' (' + MT.percent(d.value, total) + ' of ' + MT.bytes(total) + ')';
    const fg = flamegraph.default()
      .width(width)
      .cellHeight(CELL)
      .inverted(true)
      .minFrameSize(MIN_FRAME_PX)
      .transitionDuration(0)
      .title('')
      .resetHeightOnZoom(true)
      .setColorMapper((d) => frameColor(d))
      .setLabelHandler(label)
      .setSearchMatch((d, term) => !!term && d.data.name.toLowerCase().includes(term.toLowerCase()))
      .setSearchHandler((results, sum) => this.onSearch(results, sum))
      .onHover((d) => this.showDetails(d));
    d3.select(this.flameBox).datum(root).call(fg);
    this.fg = fg;
    this.flameBox.dataset.frames = this.flameBox.querySelectorAll('g.frame').length;
    this.flameBox.onmouseleave = () => this.showDetails(null);
    if (this.search.value) this.applySearch();
  };

  P.applySearch = function () {
    if (!this.fg) return;
    const term = this.search.value.trim();
    if (term) this.fg.search(term);
    else {
      this.fg.clear();
      this.showDetails(null);
    }
  };

  P.onSearch = function (results, sum) {
    this.searchText = results.length
      ? results.length + ' frame' + (results.length > 1 ? 's' : '') + ' match, holding ' + MT.bytes(sum) + ' (' + MT.percent(sum, this.total) + ')'
      : 'no frame matches';
    this.showDetails(null);
  };

  P.showDetails = function (d) {
    const el = MT.el;
    this.details.textContent = '';
    if (d) {
      const path = [];
      for (let p = d.parent; p && p.parent; p = p.parent) path.push(p.data.name);
      this.details.append(el('code', { class: 'frame', text: d.data.name }),
        el('span', { class: 'num', text: ' ' + MT.bytes(d.value) }),
        el('span', { class: 'muted', text: ' · ' + MT.percent(d.value, this.total) + ' of this live set' +
          (d.parent && d.parent.value ? ' · ' + MT.percent(d.value, d.parent.value) + ' of its caller' : '') +
          (path.length ? ' · depth ' + d.depth : '') }));
    } else if (this.search.value.trim() && this.searchText) {
      this.details.append(el('span', { text: this.searchText }));
    } else {
      this.details.append(el('span', { class: 'muted', text: 'Each bar is a frame, as wide as the bytes allocated under it; the outermost frame is on top. Hover for details, click to zoom in.' }));
    }
  };

  P.renderTop = function (top) {
    const el = MT.el;
    const r = this.report;
    this.topBox.textContent = '';
    if (!top.length) return;
    const rows = top.map((a, i) => el('tr', { 'data-bytes': a.bytes },
      el('td', { class: 'num muted', text: i + 1 }),
      el('td', { class: 'num', text: MT.bytes(a.bytes), title: MT.exactBytes(a.bytes) }),
      el('td', { text: MT.ownerName(r, a.owner) }),
      el('td', null, el('code', { class: 'addr', text: a.addr || '' })),
      el('td', { class: 'stack-cell' }, MT.stackCell(r, a.stack, this.kind))));
    this.topBox.append(el('h4', { text: this.opts.topTitle || 'Largest allocations' }),
      el('div', { class: 'table-wrap' }, el('table', { class: 'grid top' },
        el('thead', null, el('tr', null, el('th', { class: 'num', text: '#' }), el('th', { class: 'num', text: 'size' }),
          el('th', { text: 'owner' }), el('th', { text: 'address' }), el('th', { text: 'stack, innermost frame first' }))),
        el('tbody', null, rows))));
  };

  P.destroy = function () {
    if (this.ro) this.ro.disconnect();
    if (this.fg) this.fg.destroy();
  };

  P.watchSize = function () {
    if (typeof ResizeObserver === 'undefined') return;
    let timer = 0;
    this.ro = new ResizeObserver(() => {
      const w = this.flameBox.clientWidth;
      if (!this.fg || !w || Math.abs(w - this.drawnWidth) < 8) return;
      clearTimeout(timer);
      timer = setTimeout(() => this.render(), 150);
    });
    this.ro.observe(this.flameBox);
  };
})();
