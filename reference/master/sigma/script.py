"""Sigma's one inline script: signs in with a token, fetches the page with it, follows the cell's events, streams a task's logs, and sends a job owner's kill and count changes through the API."""

SCRIPT = """
(function(){
  var KEY = 'minborg-token', timer = null, connected = false, live = document.getElementById('live');
  // Every stream this page opens (events, logs) is closed when it is left: a browser keeps
  // few connections to one host, and streams left open would hold them.
  var streams = new AbortController();
  window.addEventListener('pagehide', function(){ streams.abort(); });
  // The token: from the URL's fragment (#token=..., never sent to a server), else the one this
  // tab was given, else the login form's. Kept in this tab's sessionStorage.
  var m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  function token(){ return sessionStorage.getItem(KEY) || ''; }
  function headers(extra){
    var h = {'Authorization': 'Bearer ' + token()};
    for (var k in extra) h[k] = extra[k];
    return h;
  }
  function login(message){
    var main = document.querySelector('main'), tpl = document.getElementById('login-template');
    live.textContent = 'not signed in';
    if (!tpl) { main.innerHTML = '<p>' + message + ' <a href="">sign in again</a></p>'; return; }
    main.innerHTML = tpl.innerHTML;
    document.getElementById('login-message').textContent = message || '';
    var input = document.getElementById('login-token');
    input.focus();
    document.getElementById('login-form').onsubmit = function(ev){
      ev.preventDefault();
      var t = input.value.trim();
      if (!t) { document.getElementById('login-message').textContent = 'paste a token first'; return; }
      sessionStorage.setItem(KEY, t);
      refresh().then(start, function(){});
    };
  }
  function busy(){  // the user is typing in the page: a refresh now would lose it
    var a = document.activeElement;
    return a && a.closest && a.closest('main') && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName) && a.type !== 'submit';
  }
  function refresh(force){
    timer = null;
    if (!token()) { login(''); return Promise.reject(new Error('no token')); }
    if (busy() && !force) { timer = setTimeout(refresh, 2000); return Promise.resolve(); }
    return fetch(location.href, {headers: headers({'X-Minborg-Fragment': '1'})}).then(function(r){
      if (r.status === 401) {
        sessionStorage.removeItem(KEY);
        login('The cell refused that token: it is unknown or revoked. Give another.');
        throw new Error('401');
      }
      return r.text();
    }).then(function(html){
      var doc = new DOMParser().parseFromString(html, 'text/html');
      var fresh = document.adoptNode(doc.querySelector('main') || doc.body);
      var logs = document.getElementById('logs'), next = fresh.querySelector('#logs');
      if (logs && next && logs.dataset.task === next.dataset.task) next.replaceWith(logs);  // keep the stream
      document.querySelector('main').replaceWith(fresh);
      if (doc.body.dataset.revision) document.body.dataset.revision = doc.body.dataset.revision;
      document.title = doc.title;
      var head = doc.querySelector('header');
      if (head) { var h = document.querySelector('header'); h.innerHTML = head.innerHTML; live = document.getElementById('live'); }
      live.textContent = (connected ? 'live' : 'loaded') + ', revision ' + document.body.dataset.revision;
      bind();
    });
  }
  function go(url){ said = null; history.pushState(null, '', url); return refresh(true); }
  function bind(){
    document.querySelectorAll('main form.filter').forEach(function(f){
      f.onsubmit = function(ev){
        ev.preventDefault();
        var q = new URLSearchParams(new FormData(f)), out = new URLSearchParams();
        q.forEach(function(v, k){ if (v) out.set(k, v); });
        var s = out.toString();
        go(f.getAttribute('action') + (s ? '?' + s : ''));
      };
    });
    document.querySelectorAll('main [data-method]').forEach(function(el){
      if (el.dataset.confirm && armed[el.id] > Date.now() - 5000) el.textContent = el.dataset.confirm;
      var act = function(ev){
        ev.preventDefault();
        var body = null;
        if (el.tagName === 'FORM') {
          var n = el.querySelector('input[name=task_count]').value;
          if (!/^[0-9]+$/.test(n)) { say('bad', 'the task count must be a whole number, 0 or more'); return; }
          body = JSON.stringify({task_count: parseInt(n, 10)});
        } else if (el.dataset.confirm && !(armed[el.id] > Date.now() - 5000)) {
          armed[el.id] = Date.now();  // kept by id: the page may be swapped in before the second click
          var label = el.textContent;
          el.textContent = el.dataset.confirm;
          setTimeout(function(){
            var now = document.getElementById(el.id);
            if (now && !(armed[el.id] > Date.now() - 5000)) now.textContent = label;
          }, 5100);
          return;
        }
        say('', 'sending...');
        fetch(el.dataset.url, {method: el.dataset.method,
                               headers: headers(body ? {'Content-Type': 'application/json'} : {}), body: body})
          .then(function(r){ return r.text().then(function(t){ return [r.status, t]; }); })
          .then(function(a){
            if (a[0] < 300) { say('ok', el.dataset.done || 'done'); setTimeout(refresh, 300); return; }
            say('bad', 'HTTP ' + a[0] + ': ' + why(a[1]));
          }, function(err){ say('bad', String(err)); });
      };
      if (el.tagName === 'FORM') el.onsubmit = act; else el.onclick = act;
    });
    if (said) say(said[0], said[1]);
    var logs = document.getElementById('logs');
    if (logs && !logs.dataset.following) {
      logs.dataset.following = '1';
      logs.querySelectorAll('pre[data-url]').forEach(follow);
    }
  }
  var said = null;  // the last action's outcome, shown again after the refresh it causes
  var armed = {};  // button id -> when its first click asked for a second
  function why(body){  // an API error's sentences, else its body as it came
    try { return JSON.parse(body).detail.map(function(d){ return d.error; }).join('; '); } catch (x) { return body; }
  }
  function say(css, text){
    said = [css, text];
    var r = document.getElementById('action-result');
    if (r) { r.className = css; r.textContent = text; }
  }
  // A task's log, followed: the borglet's stream relayed by the master, appended as it comes.
  function follow(pre){
    var status = document.getElementById(pre.id + '-state');
    pre.textContent = '';
    status.textContent = 'following...';
    fetch(pre.dataset.url, {headers: headers({}), signal: streams.signal}).then(function(r){
      if (!r.ok) return r.text().then(function(t){ status.textContent = 'no logs: ' + why(t); });
      var reader = r.body.getReader(), decoder = new TextDecoder();
      function pump(){
        return reader.read().then(function(chunk){
          if (chunk.done) { status.textContent = 'the stream ended: the task ended, or an hour passed; reload to follow again'; return; }
          var bottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          var text = pre.textContent + decoder.decode(chunk.value, {stream: true});
          pre.textContent = text.length > 200000 ? text.slice(-150000) : text;
          if (bottom) pre.scrollTop = pre.scrollHeight;
          status.textContent = 'following, ' + pre.textContent.split('\\n').length + ' lines';
          return pump();
        });
      }
      return pump();
    }).catch(function(err){ status.textContent = 'the stream broke: ' + err + '; reload to follow again'; });
  }
  // Server-sent events read through fetch: EventSource cannot send an Authorization header.
  function connect(){
    fetch('/v1/events?timeout_s=300&since=' + document.body.dataset.revision, {headers: headers({}), signal: streams.signal})
      .then(function(r){
        if (r.status === 410) { return refresh().then(connect); }  // compacted: load again from now
        if (!r.ok) throw new Error('HTTP ' + r.status);
        connected = true;
        live.textContent = 'live, revision ' + document.body.dataset.revision;
        var reader = r.body.getReader(), decoder = new TextDecoder(), buffer = '';
        function pump(){
          return reader.read().then(function(chunk){
            if (chunk.done) { connect(); return; }
            buffer += decoder.decode(chunk.value, {stream: true});
            var messages = buffer.split('\\n\\n');
            buffer = messages.pop();
            messages.forEach(function(msg){
              if (/^event: (task|job|machine)$/m.test(msg) && !timer) timer = setTimeout(refresh, 300);
            });
            return pump();
          });
        }
        return pump();
      })
      .catch(function(){
        if (streams.signal.aborted) return;
        connected = false; live.textContent = 'reconnecting...'; setTimeout(connect, 2000);
      });
  }
  var started = false;
  function start(){
    if (started) return;
    started = true;
    connect();
    setInterval(function(){ if (!timer) refresh(); }, 10000);  // usage changes without events
  }
  window.addEventListener('popstate', function(){ refresh(true); });
  var first = document.body.dataset.shell ? refresh() : Promise.resolve(bind());
  first.then(start, function(){});
})();
"""
