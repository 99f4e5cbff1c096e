// The challenge page's script: solves the proof of work in a Web Worker, posts the
// solution, and goes on to the page the visitor asked for, with nothing to click.
//
// The server renders the element this reads (`#anteroom-challenge`): the challenge, its
// bits, where to answer, where to return, and the visitor's language's strings in
// `data-strings` (JSON); the script carries no text of its own. Progress is told in the
// element's `role="status"` line (in steps, so a screen reader is not flooded) and, unless
// the visitor prefers reduced motion, on its `<progress>` bar. A refusal that comes with a
// fresh challenge starts again, at most MAX_RESTARTS times; after that, or when the worker
// cannot run, the line says so with a link to try again, or, when the page gives its time
// lock (`data-wait-secs`), the page waits it out and goes the no-JavaScript way
// (`<answer>/wait`). Without JavaScript the page's `<noscript>` refresh does that itself.
(function (root) {
  'use strict';

  var MAX_RESTARTS = 3;
  // The status line is rewritten only when the progress crosses a multiple of this.
  var TEXT_STEP = 20;
  var RETRY_NETWORK_MS = 1000;

  /**
   * How far along the search is, 0–99 %: the chance a solution is found within `hashes`
   * attempts (each succeeds with probability 2^-bits), so it rises steadily and never
   * claims to be done before it is.
   */
  function percent(hashes, bits) {
    var p = 1 - Math.exp(-hashes / Math.pow(2, bits));
    return Math.max(0, Math.min(99, Math.floor(p * 100)));
  }

  /** The nonce and bits of a `c1.<room>.<issued>.<bits>.<nonce>.<tag>.<mac>` string. */
  function fields(challenge) {
    var parts = String(challenge).split('.');
    if (parts.length < 7 || parts[0] !== 'c1') return null;
    var bits = parseInt(parts[parts.length - 4], 10);
    var nonce = parts[parts.length - 3];
    if (!(bits >= 0 && bits <= 32) || !nonce) return null;
    return { nonce: nonce, bits: bits };
  }

  /** `path` if it is a path on this site, else `/`. */
  function samePath(path) {
    path = String(path || '');
    return path.charAt(0) === '/' && path.charAt(1) !== '/' && path.charAt(1) !== '\\' ? path : '/';
  }

  function fill(template, n) {
    return String(template).replace('{n}', String(n));
  }

  function parseStrings(text) {
    try {
      var s = JSON.parse(text || '{}');
      return s && typeof s === 'object' ? s : {};
    } catch (e) {
      return {};
    }
  }

  /**
   * Runs the challenge of element `el`. `env` holds what the page uses from the browser:
   * `worker()` (a new Worker), `fetch`, `replace(url)` (location.replace), `now()`,
   * `reducedMotion`, `wait(ms, fn)`, and `exclusive(name, fn)`, which runs `fn` (returning
   * a promise) while no other tab of this site runs one under `name`.
   */
  function run(el, env) {
    var doc = el.ownerDocument;
    var strings = parseStrings(el.getAttribute('data-strings'));
    // A page that hands over only the failure's words (`data-error`, `data-reload`).
    if (!strings.failed && el.getAttribute('data-error')) strings.failed = el.getAttribute('data-error');
    if (!strings.reload && el.getAttribute('data-reload')) strings.reload = el.getAttribute('data-reload');
    var status = doc.getElementById('anteroom-challenge-status');
    var bar = doc.getElementById('anteroom-challenge-progress');
    var answer = el.getAttribute('data-answer') || '/__anteroom/challenge';
    var back = samePath(el.getAttribute('data-return'));
    var challenge = el.getAttribute('data-challenge') || '';
    var bits = parseInt(el.getAttribute('data-bits') || '', 10);
    var restarts = 0;
    var started = 0;
    var shownStep = -1;
    var worker = null;
    var done = false;

    if (bar) {
      if (env.reducedMotion) {
        // An indeterminate bar animates, and so does a filling one.
        bar.hidden = true;
      } else {
        bar.value = 0;
      }
    }

    function say(text) {
      if (status && text) status.textContent = text;
    }

    function show(pct) {
      if (bar && !env.reducedMotion) bar.value = pct;
      var step = Math.floor(pct / TEXT_STEP) * TEXT_STEP;
      if (step !== shownStep) {
        shownStep = step;
        if (strings.progress) say(fill(strings.progress, step));
      }
    }

    function fail() {
      done = true;
      if (worker) worker.terminate();
      if (bar) bar.hidden = true;
      if (!status) return;
      if (strings.failed) status.textContent = strings.failed + ' ';
      var link = doc.createElement('a');
      link.href = back;
      link.textContent = strings.reload || '↻';
      status.appendChild(link);
    }

    /**
     * The worker cannot run here (no Worker, no WebAssembly, a policy that blocks it): with
     * the page's time lock (`data-wait-secs`), wait it out and take the no-JavaScript way
     * in; without, say so with the link.
     */
    function cannotSolve() {
      var secs = parseInt(el.getAttribute('data-wait-secs') || '', 10);
      if (!(secs > 0) || done) return fail();
      done = true;
      if (worker) worker.terminate();
      if (bar) bar.hidden = true;
      say(strings.slow && fill(strings.slow, secs));
      env.wait(secs * 1000, function () {
        env.replace(
          answer + '/wait?c=' + encodeURIComponent(challenge) + '&r=' + encodeURIComponent(back),
        );
      });
    }

    function start(text, b) {
      var f = fields(text);
      if (!f) return fail();
      challenge = text;
      var need = Math.max(f.bits, b >= 0 && b <= 32 ? b : 0);
      shownStep = -1;
      show(0);
      started = env.now();
      worker.postMessage({ nonce: f.nonce, bits: need });
      bits = need;
    }

    function refused(body) {
      var fresh = body && body.challenge;
      if (fresh && typeof fresh.challenge === 'string' && restarts < MAX_RESTARTS) {
        restarts++;
        if (typeof fresh.answer === 'string' && fresh.answer.charAt(0) === '/') answer = fresh.answer;
        say(strings.retrying);
        start(fresh.challenge, Number(fresh.bits));
      } else {
        fail();
      }
    }

    function post(solution, solveMs) {
      // One answer at a time per room in this browser: a second tab's answer goes after the
      // first's cookie is set, so the server sees the visitor already in line and gives no
      // second place.
      env.exclusive('anteroom-challenge:' + (challenge.split('.')[1] || ''), function () {
        return send(solution, solveMs);
      });
    }

    function send(solution, solveMs) {
      return env
        .fetch(answer, {
          method: 'POST',
          credentials: 'same-origin',
          headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
          body: JSON.stringify({ challenge: challenge, solution: solution, solve_ms: solveMs }),
        })
        .then(
          function (res) {
            if (res.ok) {
              done = true;
              worker.terminate();
              env.replace(back);
              return;
            }
            return res.json().then(refused, function () {
              fail();
            });
          },
          function () {
            // The network, not the server, failed: the same answer again, from the same budget.
            if (restarts++ < MAX_RESTARTS) {
              env.wait(RETRY_NETWORK_MS, function () {
                post(solution, solveMs);
              });
            } else {
              fail();
            }
          },
        );
    }

    try {
      worker = env.worker();
    } catch (e) {
      return cannotSolve();
    }
    worker.onmessage = function (event) {
      var m = event.data || {};
      if (done) return;
      if (typeof m.progress === 'number') {
        show(percent(m.progress, bits));
      } else if (typeof m.solution === 'number') {
        var solveMs = Math.max(0, Math.round(env.now() - started));
        if (bar && !env.reducedMotion) bar.value = 100;
        say(strings.joining);
        post(m.solution, solveMs);
      } else {
        cannotSolve();
      }
    };
    worker.onerror = function () {
      if (!done) cannotSolve();
    };
    start(challenge, bits);
  }

  var api = { run: run, percent: percent, fields: fields, samePath: samePath, MAX_RESTARTS: MAX_RESTARTS };
  if (typeof root.__anteroomChallengeTest === 'function') {
    root.__anteroomChallengeTest(api);
    return;
  }

  var script = root.document.currentScript;
  var workerUrl = script && script.src
    ? script.src.replace(/challenge\.js(\?.*)?$/, 'challenge-worker.js')
    : '/__anteroom/assets/challenge-worker.js';

  function boot() {
    var el = root.document.getElementById('anteroom-challenge');
    if (!el) return;
    run(el, {
      worker: function () {
        return new root.Worker(workerUrl);
      },
      fetch: function (url, init) {
        return root.fetch(url, init);
      },
      replace: function (url) {
        root.location.replace(url);
      },
      now: function () {
        return root.performance.now();
      },
      wait: function (ms, fn) {
        root.setTimeout(fn, ms);
      },
      exclusive: function (name, fn) {
        // Web Locks (secure contexts): shared by this origin's tabs. Without them, at once.
        var locks = root.navigator && root.navigator.locks;
        if (!locks) return fn();
        return locks.request(name, fn).catch(function () {});
      },
      reducedMotion: !!(
        root.matchMedia && root.matchMedia('(prefers-reduced-motion: reduce)').matches
      ),
    });
  }

  if (root.document.readyState === 'loading') {
    root.document.addEventListener('DOMContentLoaded', boot);
  } else {
    boot();
  }
})(window);
