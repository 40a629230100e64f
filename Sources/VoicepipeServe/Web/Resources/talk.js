// The talk page: the microphone to a route's WebSocket (16 kHz mono s16le, 20 ms messages), the
// route's events shown as they come, and its answer audio (binary s16le after `audio_format`) played.
(function () {
  'use strict';
  const params = new URLSearchParams(location.search);
  const token = params.get('token');
  const $ = (id) => document.getElementById(id);
  const ui = {
    route: $('route'), talk: $('talk'), state: $('state'), error: $('error'), level: $('level'),
    speech: $('speech'), answer: $('answer'), partial: $('partial'), finals: $('finals'), events: $('events'),
  };
  if (token) $('console-link').href = '/console?token=' + encodeURIComponent(token);

  let session = null;   // { ws, stream, ctx, node, ending, opened, failed, pending, pendingBytes, droppedBytes }
  const PENDING_LIMIT = 16000 * 2 * 10;
  let player = null;    // { ctx, rate, channels, at, sources }

  function withToken(path) {
    return token ? path + (path.includes('?') ? '&' : '?') + 'token=' + encodeURIComponent(token) : path;
  }

  function showError(text) {
    ui.error.textContent = text || '';
    ui.error.hidden = !text;
  }

  function setState(text) { ui.state.textContent = text; }

  function logEvent(text) {
    const li = document.createElement('li');
    li.textContent = text;
    ui.events.prepend(li);
    while (ui.events.children.length > 40) ui.events.lastChild.remove();
  }

  async function loadRoutes() {
    let routes;
    try {
      const r = await fetch(withToken('/talk/routes.json'));
      if (!r.ok) throw new Error(r.status === 401 || r.status === 403 ? 'refused: ' + (await r.text()).trim() : 'HTTP ' + r.status);
      routes = await r.json();
    } catch (e) {
      showError('Cannot read the routes of this server (' + e.message + ').');
      return;
    }
    if (routes.length === 0) {
      showError('This server has no websocket route to talk to.');
      return;
    }
    for (const route of routes) {
      const o = document.createElement('option');
      o.value = route.path;
      o.textContent = route.name + (route.answers ? ' (answers aloud)' : '');
      o.dataset.name = route.name;
      ui.route.append(o);
    }
    const wanted = params.get('route');
    if (wanted) {
      const match = routes.find((r) => r.name === wanted);
      if (!match) { showError('There is no websocket route named "' + wanted + '".'); return; }
      ui.route.value = match.path;
    }
    ui.talk.disabled = false;
    if (params.get('autostart') === '1') start();
  }

  function micError(e) {
    if (e && (e.name === 'NotAllowedError' || e.name === 'SecurityError')) {
      return 'The microphone was refused. Allow this page to use it (the browser asks once; on a page not served from localhost it must be https) and try again.';
    }
    if (e && e.name === 'NotFoundError') return 'No microphone was found.';
    if (e && e.name === 'NotReadableError') return 'The microphone is in use by another program or cannot be opened.';
    return 'Cannot open the microphone: ' + (e && e.message ? e.message : e);
  }

  async function start() {
    if (session) return;
    showError('');
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      showError('This browser gives no microphone to this page (it needs https, or http on localhost).');
      return;
    }
    // The converter is loaded before the microphone opens, so capture starts with it ready: nothing said
    // in the first moments is lost while the module loads.
    const ctx = new AudioContext();
    try {
      await ctx.audioWorklet.addModule(withToken('/static/capture-worklet.js'));
    } catch (e) {
      ctx.close();
      showError('Cannot load the audio converter: ' + e.message);
      return;
    }
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: true, noiseSuppression: false, autoGainControl: false },
      });
    } catch (e) {
      ctx.close();
      showError(micError(e));
      return;
    }
    const source = ctx.createMediaStreamSource(stream);
    const node = new AudioWorkletNode(ctx, 'voicepipe-capture', { processorOptions: { targetRate: 16000 } });
    const mute = ctx.createGain();
    mute.gain.value = 0;
    source.connect(node).connect(mute).connect(ctx.destination);
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(scheme + '//' + location.host + withToken(ui.route.value));
    ws.binaryType = 'arraybuffer';
    // Audio captured while the connection opens is kept (up to PENDING_LIMIT bytes, 10 s) and sent first
    // once it is open: someone who speaks as soon as they press the button is heard from their first word.
    session = { ws, stream, ctx, node, ending: false, opened: false, failed: false, pending: [], pendingBytes: 0, droppedBytes: 0 };
    const mine = session;
    ui.talk.textContent = 'Stop';
    setState('connecting…');
    node.port.onmessage = (m) => {
      ui.level.style.width = Math.min(100, Math.round(Math.sqrt(m.data.peak) * 100)) + '%';
      if (mine.ending) return;
      if (ws.readyState === WebSocket.OPEN) {
        ws.send(m.data.pcm);
      } else if (ws.readyState === WebSocket.CONNECTING) {
        mine.pending.push(m.data.pcm);
        mine.pendingBytes += m.data.pcm.byteLength;
        while (mine.pendingBytes > PENDING_LIMIT) {
          const old = mine.pending.shift();
          mine.pendingBytes -= old.byteLength;
          mine.droppedBytes += old.byteLength;
        }
      }
    };
    ws.onopen = () => {
      mine.opened = true;
      for (const pcm of mine.pending) ws.send(pcm);
      mine.pending = [];
      mine.pendingBytes = 0;
      if (mine.droppedBytes > 0) {
        logEvent('the connection took long to open: the first ' + Math.round(mine.droppedBytes / 32) + ' ms of audio were not sent');
      }
      if (mine.ending) {
        ws.send(JSON.stringify({ type: 'end' }));
        setState('finishing…');
      } else {
        setState('listening');
      }
    };
    ws.onmessage = (m) => {
      if (typeof m.data === 'string') received(JSON.parse(m.data), mine);
      else play(m.data);
    };
    ws.onclose = (c) => {
      if (!mine.opened) {
        showError('Cannot reach the route ' + ui.route.value + ': the server is gone, or refused the session (busy or draining).');
      } else if (!mine.ending && !mine.failed) {
        showError(c.code === 1006 ? 'The server is gone (the connection dropped).' : 'The server ended the session (code ' + c.code + (c.reason ? ', ' + c.reason : '') + ').');
      }
      finish(mine);
    };
  }

  function stop() {
    if (!session || session.ending) return;
    session.ending = true;
    setState('finishing…');
    session.stream.getTracks().forEach((t) => t.stop());
    if (session.ws.readyState === WebSocket.OPEN) session.ws.send(JSON.stringify({ type: 'end' }));
    else if (session.ws.readyState !== WebSocket.CONNECTING) session.ws.close();
    // still connecting: the audio already captured is sent on open, followed by the end
  }

  function finish(s) {
    s.stream.getTracks().forEach((t) => t.stop());
    s.ctx.close();
    if (session === s) session = null;
    ui.talk.textContent = 'Start talking';
    ui.level.style.width = '0%';
    setState('idle');
  }

  function received(msg, s) {
    if (msg.type) { answerNote(msg); return; }
    const name = msg.event;
    switch (name) {
      case 'transcript':
        if (msg.final) {
          if (msg.text) {
            const li = document.createElement('li');
            li.textContent = msg.text;
            ui.finals.append(li);
          }
          ui.partial.textContent = '';
        } else {
          ui.partial.textContent = msg.text || '';
        }
        break;
      case 'speech_start': ui.speech.textContent = 'speech'; ui.speech.classList.add('on'); break;
      case 'speech_end': ui.speech.textContent = 'silence'; ui.speech.classList.remove('on'); break;
      case 'error':
        s.failed = true;
        showError(msg.code === 'busy' ? 'The server is busy (too many sessions at once); try again in a moment.'
          : msg.code === 'idle' ? 'The server heard no audio for too long and ended the session.'
          : 'The server reports an error: ' + (msg.message || msg.code));
        break;
    }
    if (name !== 'level') logEvent((msg.node ? msg.node + ' ' : '') + name + (msg.text ? ': ' + msg.text : '') + (msg.reason ? ' (' + msg.reason + ')' : ''));
  }

  function answerNote(msg) {
    switch (msg.type) {
      case 'audio_format':
        if (!player) player = { ctx: new AudioContext(), at: 0, sources: new Set() };
        player.rate = msg.rate;
        player.channels = msg.channels || 1;
        break;
      case 'audio_start': ui.answer.hidden = false; break;
      case 'audio_end': ui.answer.hidden = true; break;
      case 'audio_flush':
        if (player) {
          for (const src of player.sources) { try { src.stop(); } catch (_) { /* already ended */ } }
          player.sources.clear();
          player.at = 0;
        }
        ui.answer.hidden = true;
        logEvent('answer interrupted (' + msg.flushed_ms + ' ms not played)');
        return;
    }
    logEvent(msg.type);
  }

  function play(data) {
    if (!player || !player.rate) return;
    const pcm = new Int16Array(data);
    const ch = player.channels;
    const frames = Math.floor(pcm.length / ch);
    if (frames === 0) return;
    const buffer = player.ctx.createBuffer(ch, frames, player.rate);
    for (let c = 0; c < ch; c++) {
      const out = buffer.getChannelData(c);
      for (let i = 0; i < frames; i++) out[i] = pcm[i * ch + c] / 32768;
    }
    const src = player.ctx.createBufferSource();
    src.buffer = buffer;
    src.connect(player.ctx.destination);
    const now = player.ctx.currentTime;
    if (player.at < now) player.at = now + 0.05;
    src.start(player.at);
    player.at += buffer.duration;
    player.sources.add(src);
    src.onended = () => player && player.sources.delete(src);
  }

  ui.talk.addEventListener('click', () => { if (session && !session.ending) stop(); else start(); });
  // Hold the space bar to talk.
  document.addEventListener('keydown', (e) => { if (e.code === 'Space' && !e.repeat && !session && !ui.talk.disabled) { e.preventDefault(); start(); } });
  document.addEventListener('keyup', (e) => { if (e.code === 'Space' && session) { e.preventDefault(); stop(); } });
  loadRoutes();
})();
