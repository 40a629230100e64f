// The live console: the sessions of this process, and for the chosen one its graph with live figures
// on every node and edge, over server-sent events (/console/stream).
(function () {
  'use strict';
  const params = new URLSearchParams(location.search);
  const token = params.get('token');
  const $ = (id) => document.getElementById(id);
  const SVG = 'http://www.w3.org/2000/svg';
  const NODE_W = 140, NODE_H = 58, COL_W = 260, ROW_H = 110, PAD = 24;
  if (token) $('talk-link').href = '/?token=' + encodeURIComponent(token);

  let chosen = params.get('session');
  let source = null;
  let graph = null;      // the chosen session's graph, with element handles
  let sessions = [];

  function url(path, extra) {
    const q = new URLSearchParams(extra || {});
    if (token) q.set('token', token);
    const s = q.toString();
    return s ? path + '?' + s : path;
  }

  function el(name, attrs, parent) {
    const e = document.createElementNS(SVG, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.append(e);
    return e;
  }

  function fmt(n, digits) {
    if (n === null || n === undefined) return '–';
    return Number(n).toFixed(digits === undefined ? 0 : digits);
  }

  function connect() {
    if (source) source.close();
    source = new EventSource(url('/console/stream', chosen ? { session: chosen } : {}));
    source.onopen = () => { $('status').textContent = 'live'; $('error').hidden = true; };
    source.onerror = () => {
      $('status').textContent = 'reconnecting…';
      // A refused token answers 401: tell it in words (EventSource does not expose the status).
      fetch(url('/console/sessions.json')).then((r) => {
        if (r.status === 401 || r.status === 403) {
          source.close();
          r.text().then((t) => showError('The console refused this page: ' + t.trim()));
        }
      }).catch(() => showError('The server is gone; retrying.'));
    };
    source.addEventListener('sessions', (m) => showSessions(JSON.parse(m.data)));
    source.addEventListener('graph', (m) => drawGraph(JSON.parse(m.data)));
    source.addEventListener('stats', (m) => showStats(JSON.parse(m.data)));
    source.addEventListener('gone', (m) => {
      const d = JSON.parse(m.data);
      $('title').textContent = 'Session ' + d.session + ' has ended';
    });
  }

  function showError(text) { $('error').textContent = text; $('error').hidden = !text; }

  function showSessions(list) {
    sessions = list;
    $('count').textContent = '(' + list.length + ')';
    const ul = $('sessions');
    ul.replaceChildren();
    for (const s of list) {
      const li = document.createElement('li');
      const a = document.createElement('a');
      a.href = url('/console', { session: s.id });
      a.textContent = s.id;
      a.dataset.session = s.id;
      a.onclick = (e) => { e.preventDefault(); choose(s.id); };
      li.append(a, document.createTextNode(' ' + s.route + ' · ' + fmt(s.age_s) + ' s'));
      if (s.id === chosen) li.className = 'chosen';
      ul.append(li);
    }
    if (!chosen && list.length === 1) choose(list[0].id);
  }

  function choose(id) {
    chosen = id;
    history.replaceState(null, '', url('/console', { session: id }));
    connect();
  }

  function drawGraph(g) {
    $('title').textContent = g.session + ' — ' + g.name;
    const box = $('graph');
    box.replaceChildren();
    const cols = Math.max(1, ...g.nodes.map((n) => n.col + 1));
    const rows = Math.max(1, ...g.nodes.map((n) => n.row + 1));
    const svg = el('svg', { width: PAD * 2 + (cols - 1) * COL_W + NODE_W, height: PAD * 2 + (rows - 1) * ROW_H + NODE_H + 30, class: 'pipeline' }, box);
    el('defs', {}, svg).innerHTML = '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z"/></marker>';
    const at = {};
    for (const n of g.nodes) at[n.id] = { x: PAD + n.col * COL_W, y: PAD + n.row * ROW_H };
    const edges = [];
    for (const e of g.links) {
      const a = at[e.from], b = at[e.to];
      const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
      const mx = (x1 + x2) / 2;
      const path = el('path', { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, class: 'edge', 'marker-end': 'url(#arrow)' }, svg);
      const lx = x1 + 8, ly = y1 + (y2 - y1) * 0.15 - 6;
      const label = el('text', { x: lx, y: ly, class: 'edge-label' }, svg);
      const second = el("text", { x: lx, y: ly + 19, class: "edge-label dim" }, svg);
      const meterBack = el("rect", { x: lx, y: ly + 24, width: 60, height: 4, class: 'meter-back' }, svg);
      const meter = el("rect", { x: lx, y: ly + 24, width: 0, height: 4, class: 'meter-bar' }, svg);
      meterBack.style.display = meter.style.display = e.audio ? '' : 'none';
      el('title', {}, path).textContent = e.from + '.' + e.from_port + ' → ' + e.to + '.' + e.to_port;
      edges.push({ input: e.input, path, label, second, meter, audio: e.audio });
    }
    const nodes = {};
    for (const n of g.nodes) {
      const p = at[n.id];
      const group = el('g', { class: 'node', 'data-node': n.id }, svg);
      el('rect', { x: p.x, y: p.y, width: NODE_W, height: NODE_H, rx: 8 }, group);
      el('text', { x: p.x + 10, y: p.y + 18, class: 'node-id' }, group).textContent = n.id;
      el('text', { x: p.x + NODE_W - 10, y: p.y + 18, class: 'node-type' }, group).textContent = n.type;
      const figures = el('text', { x: p.x + 10, y: p.y + 36, class: 'node-figures' }, group);
      const more = el('text', { x: p.x + 10, y: p.y + 50, class: 'node-figures dim' }, group);
      nodes[n.id] = { group, figures, more };
    }
    graph = { edges, nodes };
    $('events').replaceChildren();
  }

  function showStats(s) {
    if (!graph) return;
    for (const e of graph.edges) {
      const v = s.edges[e.input];
      if (!v) continue;
      e.label.textContent = fmt(v.fps) + ' f/s · ' + v.depth + '/' + (v.capacity || '∞') + (v.dropped ? ' · ' + v.dropped + ' dropped' : '');
      e.label.setAttribute('data-sent', v.sent);
      e.second.textContent = v.p50_ms === null ? 'sent ' + v.sent : 'age ' + fmt(v.p50_ms, 1) + ' / ' + fmt(v.p99_ms, 1) + ' ms';
      e.path.classList.toggle('dropping', v.dropped > 0);
      e.path.classList.toggle('full', v.capacity > 0 && v.depth >= v.capacity);
      if (e.audio) { e.meter.setAttribute('width', Math.round(Math.sqrt(v.peak || 0) * 60)); e.label.setAttribute('data-peak', v.peak || 0); }
    }
    for (const id in graph.nodes) {
      const n = s.nodes[id];
      const g = graph.nodes[id];
      if (!n) continue;
      const c = n.counters || {};
      const parts = [];
      if (c.late) parts.push(c.late + ' late');
      if (n.restarts) parts.push(n.restarts + ' restarts');
      for (const k in n.gauges || {}) parts.push(k + ' ' + fmt(n.gauges[k], 1));
      g.figures.textContent = parts.length ? parts.join(' · ') : 'ok';
      g.group.classList.toggle('late', !!c.late);
      const others = Object.keys(c).filter((k) => k !== 'late').slice(0, 3).map((k) => k + ' ' + c[k]);
      g.more.textContent = others.join(' · ');
    }
    const ol = $('events');
    for (const e of s.events || []) {
      const li = document.createElement('li');
      li.textContent = fmt(e.ts, 2) + ' s  ' + e.node + ' ' + e.event + (e.text ? ': ' + e.text : '') + (e.reason ? ' (' + e.reason + ')' : '');
      ol.prepend(li);
    }
    while (ol.children.length > 50) ol.lastChild.remove();
    $('status').textContent = 'live' + (s.skipped ? ' · ' + s.skipped + ' updates skipped (slow page)' : '');
  }

  connect();
})();
