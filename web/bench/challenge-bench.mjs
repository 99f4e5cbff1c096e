// Browser side of the proof-of-work measurement (docs/challenge.md): solves challenges in
// headless Chromium (Debian's, through playwright-core), in a Web Worker as the waiting page
// will, and on the page's main thread, unthrottled and with CPU throttling through the
// DevTools protocol (Emulation.setCPUThrottlingRate). Prints one JSON line per run.
//
//   node web/bench/challenge-bench.mjs --function argon2id --difficulty 6,8 --count 20 \
//        --throttle 1,4 --where worker,main --argon2-m 64
//
// Serves its page on 127.0.0.1 only; the loop is bounded by --count and a per-run timeout.
import http from 'node:http';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const WEB = path.resolve(HERE, '..');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
}
const list = (s) => s.split(',').filter(Boolean);
const cfg = {
  function: arg('function', 'sha256'),
  count: Number(arg('count', '20')),
  argon2M: Number(arg('argon2-m', '1024')),
  argon2T: Number(arg('argon2-t', '1')),
  scryptLogN: Number(arg('scrypt-log-n', '10')),
};
const difficulties = list(arg('difficulty', '12')).map(Number);
const throttles = list(arg('throttle', '1,4')).map(Number);
const wheres = list(arg('where', 'worker'));
const timeoutMs = Number(arg('timeout-s', '600')) * 1000;

const files = {
  '/': ['text/html', `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>pow bench</title>
<script src="/hash-wasm.js"></script><script src="/solver.js"></script></head><body>bench</body></html>`],
  '/solver.js': ['text/javascript', readFileSync(path.join(HERE, 'solver.js'))],
  '/worker.js': ['text/javascript', "importScripts('/hash-wasm.js', '/solver.js');"],
  '/hash-wasm.js': ['text/javascript', readFileSync(path.join(WEB, 'node_modules/hash-wasm/dist/index.umd.min.js'))],
};
const server = http.createServer((req, res) => {
  const f = files[req.url ?? ''];
  if (!f) { res.writeHead(404); res.end(); return; }
  res.writeHead(200, { 'content-type': f[0] });
  res.end(f[1]);
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const origin = `http://127.0.0.1:${server.address().port}`;

const pct = (sorted, q) => sorted[Math.round((sorted.length - 1) * q)];
const params = cfg.function === 'argon2id' ? `m=${cfg.argon2M}KiB,t=${cfg.argon2T},p=1`
  : cfg.function === 'scrypt' ? `N=2^${cfg.scryptLogN},r=8,p=1` : '';

const browser = await chromium.launch({
  executablePath: CHROMIUM, headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
try {
  for (const d of difficulties) {
    for (const where of wheres) {
      for (const rate of throttles) {
        const page = await browser.newPage();
        await page.goto(origin + '/');
        const cdp = await page.context().newCDPSession(page);
        await cdp.send('Emulation.setCPUThrottlingRate', { rate });
        const out = await page.evaluate(async ({ cfg, d, where, timeoutMs }) => {
          const timer = new Promise((_, rej) => setTimeout(() => rej(new Error('timeout')), timeoutMs));
          if (where === 'main') return Promise.race([benchRun(cfg, d), timer]);
          const w = new Worker('/worker.js');
          const done = new Promise((res) => { w.onmessage = (e) => res(e.data); });
          w.postMessage({ cfg, d });
          try { return await Promise.race([done, timer]); } finally { w.terminate(); }
        }, { cfg, d, where, timeoutMs });
        await page.close();
        if (out.error) throw new Error(out.error);
        const sorted = [...out.ms].sort((a, b) => a - b);
        const total = out.ms.reduce((a, b) => a + b, 0);
        const hashes = out.counters.reduce((a, b) => a + b + 1, 0);
        console.log(JSON.stringify({
          side: 'browser', where, throttle: rate, function: cfg.function, params, difficulty: d,
          count: cfg.count, p50_ms: pct(sorted, 0.5), p95_ms: pct(sorted, 0.95), mean_ms: total / cfg.count,
          hashes_per_s: hashes / (total / 1000), counters: out.counters,
        }));
      }
    }
  }
} finally {
  await browser.close();
  server.close();
}
