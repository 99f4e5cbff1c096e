// The proof of work at the door in real headless Chromium: a room with `challenge: always`
// in front of a real origin, on the embedded store (one replica) and on a real Redis (two
// replicas sharing it), behind Debian's nginx (round robin, `X-Forwarded-For`, the
// replicas trusting nginx's address alone). A newcomer's page solves in its Web Worker and
// joins with nothing to click; two tabs of one browser challenged at once end up with one
// place; an answer another site's page posts gets nobody a place or a strike. The solve
// times the pages sent are written to test-artifacts/challenge-solve-ms.json; screenshots
// of the challenge page go to test-artifacts/ too.
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type net from 'node:net';
import path from 'node:path';
import type { Browser, BrowserContext, BrowserContextOptions, Page, Route } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN_TOKEN,
  ARTIFACTS,
  axeViolations,
  launchBrowser,
  spawnAnteroom,
  NGINX_PEER,
  startNginx,
  startOrigin,
  startRedis,
  type LoggedRequest,
  type Nginx,
  type OriginServer,
  type Redis,
  type SpawnedAnteroom,
} from './harness';

const ROOM = 'door';
const PHONE: BrowserContextOptions = {
  viewport: { width: 390, height: 844 },
  deviceScaleFactor: 2,
  isMobile: true,
  hasTouch: true,
};
const DESKTOP: BrowserContextOptions = { viewport: { width: 1280, height: 800 } };

let browser: Browser;
let origin: OriginServer;
const solveMs: { store: string; ms: number }[] = [];

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  origin = await startOrigin();
  browser = await launchBrowser();
});

afterAll(async () => {
  await browser?.close();
  await origin?.close();
  if (solveMs.length) {
    const sorted = solveMs.map((s) => s.ms).sort((a, b) => a - b);
    const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
    const summary = { n: sorted.length, p50: at(0.5), p95: at(0.95), max: sorted.at(-1), solves: solveMs };
    writeFileSync(path.join(ARTIFACTS, 'challenge-solve-ms.json'), JSON.stringify(summary, null, 2));
    console.log(`challenge solve_ms in Chromium: n=${summary.n} p50=${summary.p50} p95=${summary.p95} max=${summary.max}`);
  }
});

/** One replica's config, behind nginx: a room whose line stands still after its first
 * visitor (0.01 per second), every newcomer challenged; an access log in its directory.
 * Replicas of one store share the secrets. */
function config(originUrl: string, redis?: string) {
  return (dir: string, port: number) => `listen: "127.0.0.1:${port}"
trusted_proxies: ["${NGINX_PEER}/32"]
access_log: "${path.join(dir, 'access.log')}"
admit_interval: 100ms
cookie_secret: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
admin_token: "${ADMIN_TOKEN}"
data_dir: "${path.join(dir, 'data')}"
${redis ? `redis:\n  url: ${redis}\n` : ''}rooms:
  ${ROOM}:
    origin: ${originUrl}
    rate: 0.01
    max_active: 1000
    challenge:
      mode: always
`;
}

/** A replica with no challenge: only its scripts and CSP are used. */
function plainConfig(originUrl: string) {
  return (dir: string, port: number) => `listen: "127.0.0.1:${port}"
cookie_secret: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
admin_token: "${ADMIN_TOKEN}"
data_dir: "${path.join(dir, 'data')}"
rooms:
  ${ROOM}:
    origin: ${originUrl}
`;
}

interface Visit {
  page: Page;
  errors: string[];
  /** Every document the tab loaded: challenge pages and waiting pages. */
  documents: { url: string; challenge: boolean }[];
  /** The bodies the page posted to the challenge endpoint. */
  answers: { challenge: string; solution: number; solve_ms: number }[];
}

/** A tab that records its documents, answers and errors; with `replica`, nginx sends every
 * request it makes to that replica. */
async function tab(context: BrowserContext, replica?: string): Promise<Visit> {
  const page = await context.newPage();
  const v: Visit = { page, errors: [], documents: [], answers: [] };
  page.on('console', (m) => {
    if (m.type() === 'error') v.errors.push(m.text());
  });
  page.on('pageerror', (e) => v.errors.push(String(e)));
  page.on('request', (r) => {
    if (r.method() === 'POST' && new URL(r.url()).pathname === '/__anteroom/challenge') {
      v.answers.push(JSON.parse(r.postData() ?? '{}'));
    }
  });
  page.on('response', (r) => {
    if (r.request().isNavigationRequest() && r.request().frame() === page.mainFrame()) {
      v.documents.push({ url: r.url(), challenge: r.headers()['x-anteroom-status'] === 'challenge' });
    }
  });
  if (replica !== undefined) await page.setExtraHTTPHeaders({ 'x-replica': replica });
  return v;
}

async function boardDigits(page: Page): Promise<string> {
  return page.$$eval('#ar-board .ar-flap', (flaps) =>
    flaps.map((f) => (f as HTMLElement).dataset.digit).join(''),
  );
}

/** Waits for the tab to leave the challenge for the waiting page, and returns the position. */
async function position(page: Page): Promise<number> {
  await page.waitForSelector('html.ar-js #ar-board .ar-flap', { timeout: 30_000 });
  return Number(await boardDigits(page));
}

/** Waits for the tab to leave the challenge: in line (the board) or let straight in. */
async function joined(page: Page): Promise<void> {
  await page.waitForSelector('html.ar-js #ar-board .ar-flap, #origin-uri', { timeout: 30_000 });
}

/** The room's stats from replica a: each replica's are its own one-second snapshot of the
 * store, so reads from one replica are in order and reads from two may not be. */
async function stats(base: string): Promise<{ waiting: number }> {
  const r = await fetch(`${base}/__anteroom/admin/api/rooms/${ROOM}/stats`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'x-replica': 'a' },
  });
  expect(r.status).toBe(200);
  return (await r.json()) as { waiting: number };
}

async function eventuallyWaiting(base: string, n: number): Promise<void> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const s = await stats(base);
    if (s.waiting === n) return;
    if (Date.now() > deadline) throw new Error(`waiting is ${s.waiting}, not ${n}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Holds every request matching `pattern` until the returned function is called. */
async function hold(page: Page, pattern: string): Promise<() => void> {
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  await page.route(pattern, async (route: Route) => {
    await released;
    await route.continue().catch(() => {});
  });
  return release;
}

function recordSolves(store: string, visits: Visit[]) {
  for (const v of visits) {
    for (const a of v.answers) {
      expect(typeof a.solve_ms).toBe('number');
      solveMs.push({ store, ms: a.solve_ms });
    }
  }
}

/** SHA-256(nonce || counter as 8 bytes big-endian): the server's work function. */
function work(nonce: Buffer, counter: number): Buffer {
  const input = Buffer.alloc(nonce.length + 8);
  nonce.copy(input);
  input.writeBigUInt64BE(BigInt(counter), nonce.length);
  return createHash('sha256').update(input).digest();
}

function zeroBits(h: Buffer): number {
  let n = 0;
  for (const byte of h) {
    if (byte === 0) {
      n += 8;
      continue;
    }
    return n + Math.clz32(byte) - 24;
  }
  return n;
}

function fakeChallenge(bits: number): { text: string; nonce: Buffer } {
  const nonce = randomBytes(16);
  const now = Math.floor(Date.now() / 1000);
  return { text: `c1.${ROOM}.${now}.${bits}.${nonce.toString('base64url')}.tag.mac`, nonce };
}

describe('the challenge scripts in Chromium, served by the binary under its own CSP', () => {
  let ar: SpawnedAnteroom;
  let base: string;
  let csp: string;

  beforeAll(async () => {
    ar = await spawnAnteroom(plainConfig(origin.url));
    base = `http://127.0.0.1:${ar.port}`;
    const r = await fetch(`${base}/__anteroom/assets/challenge-worker.js`);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    csp = r.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("worker-src 'self'");
    expect(csp).toContain("'wasm-unsafe-eval'");
  });

  afterAll(async () => {
    await ar?.stop();
  });

  /** A page with the contract's element for challenge `c`, answered by `answer`, served
   * (by the test) with the binary's CSP; the scripts come from the binary. */
  async function challengePage(
    context: BrowserContext,
    first: { text: string; waitSecs?: number },
    answer: (body: { challenge: string; solution: number; solve_ms: number }) => { status: number; body: unknown },
  ) {
    const v = await tab(context);
    const strings = { slow: 'Slow way, {n} s.', progress: 'Working… {n} %', joining: 'Joining…', retrying: 'Again…', failed: 'Failed.', reload: 'Reload' };
    await v.page.route(`${base}/standalone`, (route) =>
      route.fulfill({
        status: 200,
        headers: { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': csp },
        body: `<!doctype html><html lang="en"><head><title>One moment</title>
<script src="/__anteroom/assets/challenge.js" defer></script></head><body><main>
<div id="anteroom-challenge" data-challenge="${first.text}" data-bits="17" data-answer="/__anteroom/challenge"
 data-return="/done?x=1" data-strings='${JSON.stringify(strings)}'${first.waitSecs ? ` data-wait-secs="${first.waitSecs}"` : ''}>
<p id="anteroom-challenge-status" role="status" aria-live="polite">Checking…</p>
<progress id="anteroom-challenge-progress" max="100"></progress></div></main></body></html>`,
      }),
    );
    await v.page.route(`${base}/__anteroom/challenge`, async (route) => {
      const out = answer(JSON.parse(route.request().postData() ?? '{}'));
      await route.fulfill({ status: out.status, contentType: 'application/json', body: JSON.stringify(out.body) });
    });
    await v.page.route(`${base}/done?x=1`, (route) =>
      route.fulfill({ status: 200, contentType: 'text/html', body: '<!doctype html><title>done</title><p id="done">done</p>' }),
    );
    return v;
  }

  it('solves in the worker (WebAssembly allowed by the CSP), posts the smallest solution, and goes back', async () => {
    const context = await browser.newContext(DESKTOP);
    for (let i = 0; i < 8; i++) {
      const c = fakeChallenge(17);
      const v = await challengePage(context, c, (body) => {
        expect(body.challenge).toBe(c.text);
        expect(zeroBits(work(c.nonce, body.solution))).toBeGreaterThanOrEqual(17);
        for (let k = 0; k < body.solution; k++) expect(zeroBits(work(c.nonce, k)) < 17).toBe(true);
        return { status: 200, body: { status: 'waiting', position: 1 } };
      });
      await v.page.goto(`${base}/standalone`);
      await v.page.waitForSelector('#done', { timeout: 30_000 });
      expect(new URL(v.page.url()).pathname + new URL(v.page.url()).search).toBe('/done?x=1');
      expect(v.answers).toHaveLength(1);
      expect(v.errors).toEqual([]);
      recordSolves('scripts', [v]);
      await v.page.close();
    }
    await context.close();
  });

  it('waits out the time lock and takes the no-JavaScript way when the worker cannot load', async () => {
    const context = await browser.newContext(DESKTOP);
    const c = { ...fakeChallenge(17), waitSecs: 1 };
    const v = await challengePage(context, c, () => {
      throw new Error('nothing is posted without a worker');
    });
    await context.route('**/__anteroom/assets/challenge-worker.js', (route) => route.fulfill({ status: 404, body: '' }));
    const waited: string[] = [];
    await v.page.route(`${base}/__anteroom/challenge/wait**`, (route) => {
      waited.push(route.request().url());
      return route.fulfill({ status: 200, contentType: 'text/html', body: '<!doctype html><title>w</title><p id="waited">w</p>' });
    });
    await v.page.goto(`${base}/standalone`);
    await v.page.waitForSelector('#waited', { timeout: 10_000 });
    const url = new URL(waited[0]);
    expect(url.searchParams.get('c')).toBe(c.text);
    expect(url.searchParams.get('r')).toBe('/done?x=1');
    expect(v.answers).toEqual([]);
    await context.close();
  });

  it('starts again with the fresh challenge a refusal brings, then gives up after three with a link', async () => {
    const context = await browser.newContext(DESKTOP);
    const first = fakeChallenge(12);
    const fresh = [fakeChallenge(13), fakeChallenge(13), fakeChallenge(13)];
    let n = 0;
    const v = await challengePage(context, first, (body) => {
      const expected = n === 0 ? first : fresh[n - 1];
      expect(body.challenge).toBe(expected.text);
      expect(zeroBits(work(expected.nonce, body.solution))).toBeGreaterThanOrEqual(n === 0 ? 12 : 13);
      const next = fresh[n++];
      return {
        status: 403,
        body: {
          status: 'challenge_refused',
          reason: 'replayed',
          challenge: next ? { challenge: next.text, bits: 13, answer: '/__anteroom/challenge', expires_in_secs: 300 } : undefined,
        },
      };
    });
    await v.page.goto(`${base}/standalone`);
    await v.page.waitForSelector('#anteroom-challenge-status a', { timeout: 30_000 });
    expect(n).toBe(4);
    expect(await v.page.textContent('#anteroom-challenge-status')).toBe('Failed. Reload');
    expect(await v.page.getAttribute('#anteroom-challenge-status a', 'href')).toBe('/done?x=1');
    expect(await v.page.isVisible('#anteroom-challenge-progress')).toBe(false);
    // Chromium logs each refused answer; nothing else went wrong.
    expect(v.errors.filter((e) => !e.includes('status of 403'))).toEqual([]);
    await context.close();
  });
});

/** nginx's log from entry `from` on, once `done` holds for it (bounded: nginx logs a
 * request when it is answered, a live stream when it closes). */
async function logged(nginx: Nginx, from: number, done: (log: LoggedRequest[]) => boolean): Promise<LoggedRequest[]> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const log = nginx.log().slice(from);
    if (done(log)) return log;
    if (Date.now() > deadline) throw new Error(`nginx's log never showed it:\n${log.map((l) => JSON.stringify(l)).join('\n')}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface AccessEntry {
  client: string;
  peer: string;
  method: string;
  path: string;
  class: string;
  status: number;
}

/** A replica's access log (its `access_log` file), once `done` holds for it (bounded: a
 * request is logged when its answer is done, a live stream when it closes). */
async function accessLog(r: SpawnedAnteroom, done: (log: AccessEntry[]) => boolean): Promise<AccessEntry[]> {
  const file = path.join(r.dir, 'access.log');
  const deadline = Date.now() + 10_000;
  for (;;) {
    const text = existsSync(file) ? readFileSync(file, 'utf8') : '';
    // Whole lines only: one may be half written.
    const log = text.split('\n').slice(0, -1).map((l) => JSON.parse(l) as AccessEntry);
    if (done(log)) return log;
    if (Date.now() > deadline) throw new Error(`port ${r.port}'s access log never showed it:\n${text}`);
    await new Promise((res) => setTimeout(res, 50));
  }
}

for (const store of ['embedded', 'redis'] as const) {
  describe(`the challenge in Chromium, ${store} store, behind nginx`, () => {
    let redis: Redis | undefined;
    let a: SpawnedAnteroom;
    let b: SpawnedAnteroom;
    let nginx: Nginx;
    let base: string;
    // Embedded: the one replica; Redis: two on the same store, both in nginx's upstream.
    const other = store === 'redis' ? 'b' : 'a';
    /** A replica's address as nginx logs it (`$upstream_addr`). */
    const addr = (r: SpawnedAnteroom) => `127.0.0.1:${r.port}`;

    beforeAll(async () => {
      redis = store === 'redis' ? await startRedis() : undefined;
      a = await spawnAnteroom(config(origin.url, redis?.url));
      b = redis ? await spawnAnteroom(config(origin.url, redis.url)) : a;
      nginx = await startNginx(redis ? { a: a.port, b: b.port } : { a: a.port });
      base = `http://127.0.0.1:${nginx.port}`;
    });

    afterAll(async () => {
      await nginx?.stop();
      await a?.stop();
      if (b !== a) await b?.stop();
      await redis?.stop();
    });

    it('a newcomer’s page solves and joins with nothing to click: straight in, then a place in line', async () => {
      // The first visitor is let straight in: their challenge comes from replica a, their
      // answer goes to the other replica (Redis), which checks it and spends it.
      const from = nginx.log().length;
      const first = await tab(await browser.newContext(DESKTOP), 'a');
      await first.page.route('**/__anteroom/challenge', (route) =>
        route.continue({ headers: { ...route.request().headers(), 'x-replica': other } }),
      );
      const response = await first.page.goto(`${base}/shop?item=1`);
      expect(response!.headers()['content-security-policy']).toContain("'wasm-unsafe-eval'");
      expect(response!.headers()['cache-control']).toBe('no-store');
      await first.page.waitForSelector('#origin-uri', { timeout: 30_000 });
      expect(await first.page.textContent('#origin-uri')).toBe('/shop?item=1');
      expect(first.documents.map((d) => d.challenge)).toEqual([true, false]);
      expect(first.answers).toHaveLength(1);
      expect(first.errors).toEqual([]);
      // nginx's log: the challenge page from a, the one answer through the other replica,
      // the origin's page after it.
      const log = await logged(nginx, from, (l) => l.filter((r) => r.uri === '/shop?item=1').length === 2);
      const pages = log.filter((r) => r.uri === '/shop?item=1');
      expect(pages.map((r) => r.upstream)).toEqual([addr(a), addr(a)]);
      const answers = log.filter((r) => r.method === 'POST' && r.uri === '/__anteroom/challenge');
      expect(answers.map((r) => [r.status, r.steer, r.upstream])).toEqual([[200, other, addr(store === 'redis' ? b : a)]]);

      // The next one waits: the position appears, first in line. nginx picks the replicas.
      const second = await tab(await browser.newContext(DESKTOP));
      await second.page.goto(`${base}/shop?item=2`);
      expect(await position(second.page)).toBe(1);
      expect(second.page.url()).toBe(`${base}/shop?item=2`);
      expect(second.documents.map((d) => d.challenge)).toEqual([true, false]);
      expect(second.answers).toHaveLength(1);
      expect(second.errors).toEqual([]);
      await eventuallyWaiting(base, 1);
      recordSolves(store, [first, second]);
      await first.page.context().close();
      await second.page.context().close();
    });

    it('two tabs of one browser challenged at once both join, with one place and no loop', async () => {
      const before = (await stats(base)).waiting;
      const context = await browser.newContext(DESKTOP);
      // The second tab is sent to the other replica for everything (Redis).
      const tabs = [await tab(context, 'a'), await tab(context, other)];
      // Answers are held until both tabs have solved: both are due at once, the race two
      // tabs of one browser run.
      const releases = await Promise.all(tabs.map((t) => hold(t.page, '**/__anteroom/challenge')));
      await Promise.all(tabs.map((t, i) => t.page.goto(`${base}/tab/${i}`)));
      for (const t of tabs) {
        await t.page
          .waitForFunction(() => {
            const bar = document.getElementById('anteroom-challenge-progress') as HTMLProgressElement | null;
            return bar?.value === 100;
          }, undefined, { timeout: 10_000 })
          .catch(async (e) => {
            throw new Error(`${e}: ${t.page.url()} ${JSON.stringify(t.documents)} ${t.errors}`);
          });
      }
      // Both solved; one answer is out, the other tab waits for it to come back before it
      // sends its own.
      expect(tabs[0].answers.length + tabs[1].answers.length).toBe(1);
      releases.forEach((release) => release());
      const places = await Promise.all(tabs.map((t) => position(t.page)));
      expect(places[0]).toBe(before + 1);
      expect(places[1]).toBe(places[0]);
      for (const t of tabs) {
        // One challenge page and one waiting page each: no second challenge, no loop.
        expect(t.documents.map((d) => d.challenge)).toEqual([true, false]);
        expect(t.answers).toHaveLength(1);
        expect(t.errors).toEqual([]);
      }
      await eventuallyWaiting(base, before + 1);
      // Still one place a while later: neither tab comes back to the challenge.
      await tabs[0].page.reload();
      expect(await position(tabs[0].page)).toBe(places[0]);
      expect(tabs[0].documents.filter((d) => d.challenge)).toHaveLength(1);
      recordSolves(store, tabs);
      await context.close();
    });

    it('passes axe-core while it works, in English on a desktop and Arabic on a phone', async () => {
      for (const [name, options] of [
        ['desktop', { ...DESKTOP, locale: 'en-GB' }],
        ['ar-phone', { ...PHONE, locale: 'ar', colorScheme: 'dark' }],
      ] as [string, BrowserContextOptions][]) {
        const v = await tab(await browser.newContext(options));
        // As first painted (the script not run yet), then while the answer is on its way.
        const script = await hold(v.page, '**/__anteroom/assets/challenge.js');
        const answer = await hold(v.page, '**/__anteroom/challenge');
        await v.page.goto(`${base}/look/${name}`, { waitUntil: 'commit' });
        await v.page.waitForSelector('#anteroom-challenge-status');
        expect(await v.page.getAttribute('#anteroom-challenge-status', 'aria-live')).toBe('polite');
        if (store === 'embedded') {
          expect(await axeViolations(v.page)).toEqual([]);
          await v.page.screenshot({ path: path.join(ARTIFACTS, `challenge-${name}.png`), fullPage: true });
        }
        script();
        await v.page.waitForFunction(() => {
          const bar = document.getElementById('anteroom-challenge-progress') as HTMLProgressElement | null;
          return bar?.value === 100;
        });
        const status = await v.page.textContent('#anteroom-challenge-status');
        const strings = JSON.parse((await v.page.getAttribute('#anteroom-challenge', 'data-strings')) ?? '{}');
        expect(status).toBe(strings.joining);
        if (name === 'ar-phone') expect(await v.page.getAttribute('html', 'dir')).toBe('rtl');
        if (store === 'embedded') {
          expect(await axeViolations(v.page)).toEqual([]);
          await v.page.screenshot({ path: path.join(ARTIFACTS, `challenge-${name}-solved.png`), fullPage: true });
        }
        answer();
        await joined(v.page);
        expect(v.errors).toEqual([]);
        recordSolves(store, [v]);
        await v.page.context().close();
      }
    });

    it('with reduced motion, shows no moving bar and still joins', async () => {
      const v = await tab(await browser.newContext({ ...PHONE, reducedMotion: 'reduce' }));
      const answer = await hold(v.page, '**/__anteroom/challenge');
      await v.page.goto(`${base}/calm`);
      await v.page.waitForFunction(() => document.getElementById('anteroom-challenge-progress')?.hidden === true);
      expect(await v.page.isVisible('#anteroom-challenge-progress')).toBe(false);
      expect(await v.page.isVisible('#anteroom-challenge-status')).toBe(true);
      answer();
      await joined(v.page);
      recordSolves(store, [v]);
      await v.page.context().close();
    });

    it('nginx shared the visitors between the replicas: answers and live streams on each, the rest round robin', async () => {
      // Every tab above is closed now, so nginx has logged its live stream too.
      const replicas = store === 'redis' ? [a, b] : [a];
      const log = await logged(nginx, 0, (l) =>
        replicas.every((r) => l.some((e) => e.uri === '/__anteroom/events' && e.upstream === addr(r))),
      );
      for (const r of replicas) {
        const served = log.filter((e) => e.upstream === addr(r));
        // Answers it checked and took (the first visitor's on the other replica, the two
        // tabs' on theirs), and the waiting pages' live streams it held.
        expect(served.some((e) => e.method === 'POST' && e.uri === '/__anteroom/challenge' && e.status === 200)).toBe(true);
        expect(served.some((e) => e.method === 'GET' && e.uri === '/__anteroom/events' && e.status === 200)).toBe(true);
      }
      // Each replica's own access log says the same, and that it knew the visitor by the
      // address nginx forwarded for them (trusted_proxies), not by nginx's own.
      for (const r of replicas) {
        const own = await accessLog(r, (l) =>
          l.some((e) => e.class === 'challenge' && e.method === 'POST' && e.status === 200) && l.some((e) => e.class === 'events'),
        );
        // All but the health checks spawnAnteroom made before nginx was there.
        const proxied = own.filter((e) => e.class !== 'health');
        expect(proxied.length).toBeGreaterThan(10);
        expect(proxied.filter((e) => e.client !== '127.0.0.1' || !e.peer.startsWith(`${NGINX_PEER}:`))).toEqual([]);
      }
      // What nobody steered nginx dealt out in turn: as many to one replica as to the other,
      // give or take the last.
      const free = log.filter((e) => e.steer === '-');
      const counts = replicas.map((r) => free.filter((e) => e.upstream === addr(r)).length);
      expect(counts.reduce((x, y) => x + y)).toBe(free.length);
      expect(Math.max(...counts) - Math.min(...counts), JSON.stringify(counts)).toBeLessThanOrEqual(1);
      expect(Math.min(...counts)).toBeGreaterThan(10);
      // No request failed at nginx or at a replica.
      expect(log.filter((e) => e.status >= 500)).toEqual([]);
    });
  });
}

/** The cookie the visitor gets when they join. */
const VISITOR_COOKIE = 'ar_visitor';
/** Another site to Chromium: another host than the shop's 127.0.0.1. */
const OTHER_SITE = '127.0.0.2';

describe("an answer another site's page posts, in Chromium", () => {
  let shop: SpawnedAnteroom;
  let base: string;
  let other: http.Server;
  let otherBase: string;
  /** The hostile pages the other site serves, by path. */
  const pages = new Map<string, string>();

  beforeAll(async () => {
    // Straight in when an answer is taken (rate and room to spare), so a join shows as
    // `active`; abuse on (the default), strikes counted.
    shop = await spawnAnteroom(
      (dir, port) => `listen: "127.0.0.1:${port}"
cookie_secret: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
admin_token: "${ADMIN_TOKEN}"
data_dir: "${path.join(dir, 'data')}"
rooms:
  ${ROOM}:
    origin: ${origin.url}
    rate: 100
    max_active: 1000
    challenge:
      mode: always
`,
    );
    base = `http://127.0.0.1:${shop.port}`;
    other = http.createServer((req, res) => {
      const html = pages.get(req.url ?? '');
      res.writeHead(html ? 200 : 404, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
      res.end(html ?? '');
    });
    await new Promise<void>((r) => other.listen(0, OTHER_SITE, r));
    otherBase = `http://${OTHER_SITE}:${(other.address() as net.AddressInfo).port}`;
  });

  afterAll(async () => {
    if (other) {
      other.closeAllConnections();
      await new Promise((r) => other.close(r));
    }
    await shop?.stop();
  });

  async function admin(pathname: string): Promise<string> {
    const r = await fetch(`${base}/__anteroom/admin/api/${pathname}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(r.status).toBe(200);
    return r.text();
  }

  /** A sample from the shop's metrics (0 when the series is not there yet). */
  async function metric(name: string): Promise<number> {
    const text = await admin('metrics');
    const line = text.split('\n').find((l) => l.startsWith(`${name} `));
    return line ? Number(line.slice(name.length + 1)) : 0;
  }

  /** Every `anteroom_strikes_total` series, by reason. */
  async function strikes(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const m of (await admin('metrics')).matchAll(/^anteroom_strikes_total\{reason="([^"]+)"\} (\d+)/gm)) out[m[1]] = Number(m[2]);
    return out;
  }

  /** A challenge for 127.0.0.1 (the browser's address too), as a JSON client gets it, and
   * its smallest solution. */
  async function solvedChallenge(): Promise<{ challenge: string; bits: number; solution: number }> {
    const r = await fetch(`${base}/checkout`, { headers: { accept: 'application/json' } });
    const body = (await r.json()) as { status: string; challenge: { challenge: string; bits: number } };
    expect(body.status).toBe('challenge');
    const { challenge, bits } = body.challenge;
    const nonce = Buffer.from(challenge.split('.')[4], 'base64url');
    let solution = 0;
    while (zeroBits(work(nonce, solution)) < bits) solution++;
    return { challenge, bits, solution };
  }

  it('gets the visitor no place, no cookie and no strike; counted as cross_site; the same answer from the shop’s own page joins', async () => {
    const failed = `anteroom_challenges_failed_total{room="${ROOM}",reason="cross_site"}`;
    const solved = `anteroom_challenges_solved_total{room="${ROOM}"}`;
    const before = { failed: await metric(failed), solved: await metric(solved) };
    const answer = await solvedChallenge();
    // Say the visitor's own challenge and its solution leaked to the other site: a valid
    // answer, unspent, bound to the visitor's address and this room.
    const fields = `<input name="challenge" value="${answer.challenge}"><input name="solution" value="${answer.solution}">`;
    pages.set('/form', `<!doctype html><html lang="en"><head><title>Win a prize</title></head><body>
<form method="post" action="${base}/__anteroom/challenge">${fields}</form>
<script>document.forms[0].submit();</script></body></html>`);
    pages.set('/fetch', `<!doctype html><html lang="en"><head><title>Win a prize</title></head><body><script>
const body = new URLSearchParams({ challenge: ${JSON.stringify(answer.challenge)}, solution: '${answer.solution}' });
window.sent = fetch('${base}/__anteroom/challenge', { method: 'POST', mode: 'no-cors', credentials: 'include', body })
  .then((r) => r.type, (e) => String(e));
</script></body></html>`);

    const context = await browser.newContext(DESKTOP);
    const page = await context.newPage();
    // The answers as they went over the wire, read through the DevTools protocol's network
    // events: they see the headers Chromium sent and got even for an opaque answer.
    interface Posted {
      url: string;
      method: string;
      site?: string;
      origin?: string;
      status: number;
      setCookie?: string;
    }
    const byId = new Map<string, Posted>();
    const entry = (id: string) => {
      let p = byId.get(id);
      if (!p) byId.set(id, (p = { url: '', method: '', status: 0 }));
      return p;
    };
    const lower = (h: Record<string, string>) => Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v]));
    const cdp = await context.newCDPSession(page);
    await cdp.send('Network.enable');
    cdp.on('Network.requestWillBeSent', (e) => Object.assign(entry(e.requestId), { url: e.request.url, method: e.request.method }));
    cdp.on('Network.requestWillBeSentExtraInfo', (e) => {
      const h = lower(e.headers);
      Object.assign(entry(e.requestId), { site: h['sec-fetch-site'], origin: h.origin });
    });
    cdp.on('Network.responseReceivedExtraInfo', (e) =>
      Object.assign(entry(e.requestId), { status: e.statusCode, setCookie: lower(e.headers)['set-cookie'] }),
    );
    const posted = () =>
      [...byId.values()].filter((p) => p.method === 'POST' && p.url.startsWith(`${base}/__anteroom/challenge`) && p.status);

    // A form the other site's page submits on its own, top-level: the answer is refused
    // and the refusal is what the browser shows.
    const [navigated] = await Promise.all([
      page.waitForResponse((r) => new URL(r.url()).pathname === '/__anteroom/challenge'),
      page.goto(`${otherBase}/form`),
    ]);
    expect(navigated.status()).toBe(403);
    await page.waitForURL(`${base}/__anteroom/challenge`);
    // A fetch the page makes without asking to read the answer (no-cors): opaque to it.
    const [fetched] = await Promise.all([
      page.waitForResponse((r) => new URL(r.url()).pathname === '/__anteroom/challenge'),
      page.goto(`${otherBase}/fetch`),
    ]);
    expect(fetched.status()).toBe(403);
    expect(await page.evaluate(() => (window as unknown as { sent: Promise<string> }).sent)).toBe('opaque');

    // Chromium said where both came from; anteroom refused both and set no cookie.
    await expect.poll(() => posted().length).toBe(2);
    expect(posted().map((p) => [p.site, p.origin, p.status, p.setCookie])).toEqual([
      ['cross-site', otherBase, 403, undefined],
      ['cross-site', otherBase, 403, undefined],
    ]);
    expect((await context.cookies(base)).filter((c) => c.name === VISITOR_COOKIE)).toEqual([]);
    // Counted as refused answers from another site; nothing taken, nobody struck or banned.
    expect(await metric(failed)).toBe(before.failed + 2);
    expect(await metric(solved)).toBe(before.solved);
    const struck = await strikes();
    expect(Object.keys(struck).length).toBeGreaterThan(0);
    expect(Object.values(struck).every((n) => n === 0), JSON.stringify(struck)).toBe(true);
    expect(JSON.parse(await admin('bans')).bans).toEqual([]);
    // The visitor's address still gets the base work, as with no strike.
    expect((await solvedChallenge()).bits).toBe(answer.bits);

    // Control: the very same answer, from the shop's own page (a document of the shop's
    // origin), is taken, and the visitor joins: so the refusals above were for where the
    // answer came from alone, the answer was unspent, and a join shows in the stats.
    await page.route(`${base}/own`, (route) =>
      route.fulfill({ status: 200, contentType: 'text/html', body: '<!doctype html><title>The shop</title><p>own</p>' }),
    );
    await page.goto(`${base}/own`);
    const own = await page.evaluate(
      async ([challenge, solution]) => {
        const r = await fetch('/__anteroom/challenge', { method: 'POST', body: new URLSearchParams({ challenge, solution }) });
        return { status: r.status, body: await r.json() };
      },
      [answer.challenge, String(answer.solution)],
    );
    expect(own.status).toBe(200);
    expect(own.body.status).toBe('admitted');
    await expect.poll(() => posted().length).toBe(3);
    const ownPost = posted()[2];
    expect([ownPost.site, ownPost.status, ownPost.setCookie?.startsWith(`${VISITOR_COOKIE}=`)]).toEqual(['same-origin', 200, true]);
    expect((await context.cookies(base)).filter((c) => c.name === VISITOR_COOKIE)).toHaveLength(1);
    expect(await metric(solved)).toBe(before.solved + 1);
    // The one-second stats show the one join, and only it, once they catch up with it.
    await expect
      .poll(async () => JSON.parse(await admin(`rooms/${ROOM}/stats`)).active, { timeout: 5_000, interval: 100 })
      .toBe(1);
    const stats = JSON.parse(await admin(`rooms/${ROOM}/stats`));
    expect([stats.waiting, stats.active]).toEqual([0, 1]);
    await context.close();
  });
});
