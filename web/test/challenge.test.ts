// The proof of work at the door in real headless Chromium: a room with `challenge: always`
// in front of a real origin, on the embedded store (one replica) and on a real Redis (two
// replicas sharing it). A newcomer's page solves in its Web Worker and joins with nothing
// to click; two tabs of one browser challenged at once end up with one place. The solve
// times the pages sent are written to test-artifacts/challenge-solve-ms.json; screenshots
// of the challenge page go to test-artifacts/ too.
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Browser, BrowserContext, BrowserContextOptions, Page, Route } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN_TOKEN,
  ARTIFACTS,
  axeViolations,
  launchBrowser,
  spawnAnteroom,
  startOrigin,
  startBalancer,
  startRedis,
  type Balancer,
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

/** One replica's config: a room whose line stands still after its first visitor (0.01 per
 * second), every newcomer challenged. Replicas of one store share the secrets. */
function config(originUrl: string, redis?: string) {
  return (dir: string, port: number) => `listen: "127.0.0.1:${port}"
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

/** A tab that records its documents, answers and errors; with `replica`, the load balancer
 * sends every request it makes to that replica. */
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

async function stats(base: string): Promise<{ waiting: number }> {
  const r = await fetch(`${base}/__anteroom/admin/api/rooms/${ROOM}/stats`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
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

for (const store of ['embedded', 'redis'] as const) {
  describe(`the challenge in Chromium, ${store} store`, () => {
    let redis: Redis | undefined;
    let a: SpawnedAnteroom;
    let b: SpawnedAnteroom;
    let balancer: Balancer;
    let base: string;
    // Embedded: the one replica; Redis: two on the same store, behind a balancer.
    const other = store === 'redis' ? 'b' : 'a';

    beforeAll(async () => {
      redis = store === 'redis' ? await startRedis() : undefined;
      a = await spawnAnteroom(config(origin.url, redis?.url));
      b = redis ? await spawnAnteroom(config(origin.url, redis.url)) : a;
      balancer = await startBalancer({ a: a.port, b: b.port });
      base = `http://127.0.0.1:${balancer.port}`;
    });

    afterAll(async () => {
      await balancer?.close();
      await a?.stop();
      if (b !== a) await b?.stop();
      await redis?.stop();
    });

    it('a newcomer’s page solves and joins with nothing to click: straight in, then a place in line', async () => {
      // The first visitor is let straight in; their answer goes to the other replica.
      const first = await tab(await browser.newContext(DESKTOP));
      await first.page.route('**/__anteroom/challenge', (route) =>
        route.continue({ headers: { ...route.request().headers(), 'x-replica': other } }),
      );
      const answeredBefore = balancer.counts[other];
      const response = await first.page.goto(`${base}/shop?item=1`);
      expect(response!.headers()['content-security-policy']).toContain("'wasm-unsafe-eval'");
      expect(response!.headers()['cache-control']).toBe('no-store');
      await first.page.waitForSelector('#origin-uri', { timeout: 30_000 });
      expect(await first.page.textContent('#origin-uri')).toBe('/shop?item=1');
      expect(first.documents.map((d) => d.challenge)).toEqual([true, false]);
      expect(first.answers).toHaveLength(1);
      expect(balancer.counts[other]).toBeGreaterThan(answeredBefore);
      expect(first.errors).toEqual([]);

      // The next one waits: the position appears, first in line.
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
  });
}
