// "A page on another site cannot get the shop's visitor banned" (docs/security.md, "Strikes only
// from the client's own acts"), in real headless Chromium against the real anteroom binary.
//
// The shop is anteroom on 127.0.0.1 in front of a small origin; the hostile page is served
// from 127.0.0.2, another host and so another *site* to Chromium, which labels every
// request that page makes to the shop `Sec-Fetch-Site: cross-site` (a page cannot forge or
// remove that header; it is what the product judges by). The hostile page makes the
// visitor's browser ask the shop for 200 images, a script, a frame, grants (made up,
// forged and real) and ban paths (`/.env`, `/.git/config`). None of that may strike, ban,
// spend or refuse a grant, or join the line: the visitor stays on the site.
//
// Controls show the test can see a ban when one happens:
// - the same visitor's own (same-origin) navigation to `/.env` bans them at once;
// - the very same hostile page, its requests sent through a proxy that strips the
//   browser's `Sec-Fetch-*` headers on the way (so anteroom cannot tell they are another
//   site's, as with an old browser), does get the visitor banned: its flood alone (by
//   join-limit strikes), and its ban paths alone. This is the protection switched off,
//   as far as a test outside the binary can switch it off.
//
// Everything is on loopback: 127.0.0.1 (shop, origin, admin listener), 127.0.0.2 (the
// other site), 127.0.0.3 (the test's own admin API client, in `abuse.allow`, so the test
// can still read the bans after 127.0.0.1 is banned: bans hold on the admin listener too).
import { createHmac } from 'node:crypto';
import http from 'node:http';
import type net from 'node:net';
import path from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, freePort, launchBrowser, spawnAnteroom, type SpawnedAnteroom } from './harness';

/** The address the test reads the admin API from: in `abuse.allow`, never banned. */
const ADMIN_CLIENT = '127.0.0.3';
/** The other site's address: another host than the shop's 127.0.0.1, so another site. */
const OTHER_SITE = '127.0.0.2';
const PRIORITY_SECRET = 'browser-test-priority-secret-0123456789abcdef';
const ROOM = 'shop';
/** How many images the hostile page embeds. With the default join limit (120 a minute)
 * and 20 strikes to a ban, any 140 or so cookie-less joins from one address would ban it
 * if embeds were judged as the visitor's own arrivals. */
const IMAGES = 200;
/** Loads hold no fixed sleeps: every wait is a poll with this bound. */
const SETTLE_MS = 30_000;

let browser: Browser;
/** Everything a test started, stopped after it in reverse order, whatever happened. */
let cleanups: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  browser = await launchBrowser();
});

afterEach(async () => {
  for (const stop of cleanups.reverse()) await stop().catch(() => undefined);
  cleanups = [];
});

afterAll(async () => {
  await browser?.close();
});

// ---------------------------------------------------------------------------------------
// The pieces: an origin that records fetch metadata, the shop, the other site, a proxy.

interface Seen {
  url: string;
  site: string | undefined;
  dest: string | undefined;
}

interface Origin {
  url: string;
  seen: Seen[];
}

/** The shop's origin: a real GIF for `/pic.png` and for anything asked for as an image, a
 * script for `/shop.js`, else an HTML page naming the path asked for; never cached, so
 * every embed is a request. Records each request's
 * `Sec-Fetch-Site` and `Sec-Fetch-Dest` as anteroom passed them on. */
async function startOrigin(): Promise<Origin> {
  const seen: Seen[] = [];
  const gif = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64');
  const server = http.createServer((req, res) => {
    const url = req.url ?? '';
    seen.push({
      url,
      site: req.headers['sec-fetch-site'] as string | undefined,
      dest: req.headers['sec-fetch-dest'] as string | undefined,
    });
    const pathname = url.split('?')[0];
    if (pathname === '/pic.png' || req.headers['sec-fetch-dest'] === 'image') {
      res.writeHead(200, { 'content-type': 'image/gif', 'cache-control': 'no-store' });
      res.end(gif);
    } else if (pathname === '/shop.js') {
      res.writeHead(200, { 'content-type': 'text/javascript', 'cache-control': 'no-store' });
      res.end('window.__shopScript = true;');
    } else {
      const uri = url.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
      res.end(
        `<!doctype html><html lang="en"><head><title>The shop</title></head><body><h1>The shop</h1><p id="origin-uri">${uri}</p></body></html>`,
      );
    }
  });
  await listen(server, '127.0.0.1');
  cleanups.push(() => close(server));
  return { url: `http://127.0.0.1:${port(server)}`, seen };
}

interface Shop {
  /** The public listener, http://127.0.0.1:port. */
  base: string;
  adminPort: number;
  anteroom: SpawnedAnteroom;
}

/** anteroom in front of `origin`: the embedded store, abuse on with ban paths, a room that
 * lets a visitor straight in (rate and capacity to spare) and the default join limit
 * (120 a minute per address), a priority secret (so grants are judged at all), and the
 * admin API on a listener of its own. */
async function startShop(origin: string): Promise<Shop> {
  const adminPort = await freePort();
  const anteroom = await spawnAnteroom(
    (dir, port) => `listen: "127.0.0.1:${port}"
admin_listen: "127.0.0.1:${adminPort}"
admit_interval: 100ms
cookie_secret: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
admin_token: "${ADMIN_TOKEN}"
priority_secret: "${PRIORITY_SECRET}"
data_dir: "${path.join(dir, 'data')}"
abuse:
  strikes: 20
  window: 1m
  cooldown: 10m
  allow: [${ADMIN_CLIENT}]
  ban_paths: [/.env, '/.git/**']
rooms:
  ${ROOM}:
    origin: ${origin}
    rate: 1000
    max_active: 10000
    join_limit_per_ip: 120
    join_limit_window: 1m
`,
  );
  cleanups.push(() => anteroom.stop());
  return { base: `http://127.0.0.1:${anteroom.port}`, adminPort, anteroom };
}

/** A GET on the shop's admin listener, from {@link ADMIN_CLIENT}. */
function adminGet(shop: Shop, pathname: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(
      {
        host: '127.0.0.1',
        port: shop.adminPort,
        localAddress: ADMIN_CLIENT,
        path: pathname,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
        agent: false,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
  });
}

interface BanView {
  target: string;
  source: string;
  reason: string;
}

async function bans(shop: Shop): Promise<BanView[]> {
  const r = await adminGet(shop, '/__anteroom/admin/api/bans?limit=1000');
  expect(r.status, r.body).toBe(200);
  return (JSON.parse(r.body) as { bans: BanView[] }).bans;
}

/** Whether a ban covers 127.0.0.1 (the browser's address), as an address or a range. */
function bansLoopback(list: BanView[]): boolean {
  return list.some((b) => b.target === '127.0.0.1' || b.target === '127.0.0.1/32' || b.target.startsWith('127.0.0.0/'));
}

/** `anteroom_strikes_total` by reason, from the admin listener's `/metrics`. */
async function strikes(shop: Shop): Promise<Record<string, number>> {
  const r = await adminGet(shop, '/metrics');
  expect(r.status).toBe(200);
  const out: Record<string, number> = {};
  for (const m of r.body.matchAll(/^anteroom_strikes_total\{reason="([^"]+)"\} (\d+)/gm)) out[m[1]] = Number(m[2]);
  return out;
}

/** A priority grant for the shop's room, signed with the right secret (docs/security.md format
 * `v1.<room>.<expiry>.<nonce>.<mac>`), good for ten minutes. */
function mintGrant(nonce: string, secret = PRIORITY_SECRET): string {
  const payload = `v1.${ROOM}.${Math.floor(Date.now() / 1000) + 600}.${nonce}`;
  return `${payload}.${createHmac('sha256', secret).update(payload).digest('base64url')}`;
}

/** The hostile page, on `shop` as another site sees it: the flood (200 images, a script,
 * a frame, grants made up, forged and real) and the ban paths, or either alone. Every
 * embed counts itself into `window.__settled` when it loads or fails, so the test knows
 * when all have been asked for and answered. */
function hostilePage(
  shop: string,
  grant: string,
  parts: { flood: boolean; banPaths: boolean } = { flood: true, banPaths: true },
): { html: string; embeds: number } {
  const el: string[] = [];
  const s = 'onload="s()" onerror="s()"';
  if (parts.flood) {
    for (let i = 0; i < IMAGES; i++) el.push(`<img ${s} src="${shop}/pic.png?n=${i}" alt="">`);
    el.push(`<script ${s} src="${shop}/shop.js?from=elsewhere"></script>`);
    el.push(`<iframe ${s} src="${shop}/cart?framed=1" title="shop"></iframe>`);
    for (let i = 0; i < 4; i++) {
      // Made up: not a grant at all.
      el.push(`<img ${s} src="${shop}/?ar_grant=x&amp;n=${i}" alt="">`);
      // Well-formed but forged (another secret): a strike of 5 each if it were the
      // visitor's own act, so four of them would be a ban.
      const forged = mintGrant(`forgedforgedforged${i}`, 'not-the-shops-secret-0123456789abcdef');
      el.push(`<img ${s} src="${shop}/?ar_grant=${forged}&amp;n=${i}" alt="">`);
      // Real: one of them would spend it, and the owner's own use would then be refused.
      el.push(`<img ${s} src="${shop}/?ar_grant=${grant}&amp;n=${i}" alt="">`);
    }
  }
  if (parts.banPaths) {
    for (let i = 0; i < 4; i++) el.push(`<img ${s} src="${shop}/.env?n=${i}" alt="">`);
    el.push(`<img ${s} src="${shop}/.git/config" alt="">`);
    el.push(`<iframe ${s} src="${shop}/.env?framed=1" title="env"></iframe>`);
  }
  const html = `<!doctype html><html lang="en"><head><title>Another site</title>
<script>window.__settled = 0; function s() { window.__settled++; }</script></head>
<body><h1>Nothing to see here</h1>
${el.join('\n')}
</body></html>`;
  return { html, embeds: el.length };
}

/** Another site, on {@link OTHER_SITE}, serving the hostile page at `/`. */
async function startOtherSite(html: string): Promise<string> {
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
    res.end(html);
  });
  await listen(server, OTHER_SITE);
  cleanups.push(() => close(server));
  return `http://${OTHER_SITE}:${port(server)}/`;
}

/** A proxy on 127.0.0.1 in front of the shop that removes the browser's `Sec-Fetch-*`
 * headers: to anteroom every request then looks like one from a browser without fetch
 * metadata (judged as the client's own act, docs/security.md), which is what every request would
 * look like if anteroom ignored the header. It connects from 127.0.0.1, the browser's own
 * address, so any strike or ban lands on the visitor as it would have. */
async function startStrippingProxy(shop: Shop): Promise<string> {
  const agent = new http.Agent({ keepAlive: true, localAddress: '127.0.0.1' } as http.AgentOptions);
  const target = new URL(shop.base);
  const server = http.createServer((req, res) => {
    const headers = { ...req.headers };
    for (const h of Object.keys(headers)) if (h.startsWith('sec-fetch-')) delete headers[h];
    const up = http.request(
      { host: target.hostname, port: target.port, path: req.url, method: req.method, headers, agent },
      (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers);
        r.pipe(res);
      },
    );
    up.on('error', () => {
      res.writeHead(502);
      res.end();
    });
    req.pipe(up);
  });
  await listen(server, '127.0.0.1');
  cleanups.push(async () => {
    agent.destroy();
    await close(server);
  });
  return `http://127.0.0.1:${port(server)}`;
}

function listen(server: http.Server, host: string): Promise<void> {
  return new Promise((r) => server.listen(0, host, r));
}

function close(server: http.Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((r) => server.close(() => r()));
}

function port(server: http.Server): number {
  return (server.address() as net.AddressInfo).port;
}

// ---------------------------------------------------------------------------------------
// The visitor.

async function newVisitor(): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext();
  cleanups.push(() => context.close());
  return { context, page: await context.newPage() };
}

async function visitorCookie(context: BrowserContext): Promise<string | undefined> {
  return (await context.cookies('http://127.0.0.1/')).find((c) => c.name === 'ar_visitor')?.value;
}

/** A top-level navigation to the shop that must show the origin's page for `pathname`:
 * admitted, neither banned (403/429) nor held in line. */
async function expectOnSite(page: Page, url: string, pathname: string): Promise<void> {
  const r = await page.goto(url);
  expect(r, url).not.toBeNull();
  const status = r!.headers()['x-anteroom-status'];
  expect(r!.status(), `${url}: ${status}`).toBe(200);
  expect(status ?? 'on the site').not.toMatch(/banned|waiting|refused/);
  expect(await page.textContent('#origin-uri')).toBe(pathname);
}

interface Answer {
  url: string;
  /** The `Sec-Fetch-Site` Chromium sent. */
  site?: string;
  /** The HTTP status as it came off the wire (0 until it has). */
  status: number;
  anteroom?: string;
  setCookie?: string;
  /** Set when Chromium did not hand the answer to the page, e.g. `net::ERR_BLOCKED_BY_ORB`
   * for an image whose answer is HTML (a 404 or 429 page), `net::ERR_BLOCKED_BY_RESPONSE`
   * for a frame the answer refuses to be framed in. The status is still seen. */
  failure?: string;
}

/** Shows the hostile page to the visitor and waits (bounded) until every embed on it has
 * loaded or failed and every one of its requests to the shop (127.0.0.1) has had its
 * answer. Returns what each got. Read through the DevTools protocol's network events,
 * which see the headers as sent and as received even when Chromium keeps the answer
 * from the page (opaque-response blocking, frame refusal), and see the frames' requests. */
async function underAttack(page: Page, url: string, embeds: number): Promise<Answer[]> {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Network.enable');
  const byId = new Map<string, Answer>();
  const entry = (id: string) => {
    let a = byId.get(id);
    if (!a) byId.set(id, (a = { url: '', status: 0 }));
    return a;
  };
  const lower = (h: Record<string, string>) => Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v]));
  cdp.on('Network.requestWillBeSent', (e) => void (entry(e.requestId).url = e.request.url));
  cdp.on('Network.requestWillBeSentExtraInfo', (e) => void (entry(e.requestId).site = lower(e.headers)['sec-fetch-site']));
  cdp.on('Network.responseReceivedExtraInfo', (e) => {
    const a = entry(e.requestId);
    const h = lower(e.headers);
    a.status = e.statusCode;
    a.anteroom = h['x-anteroom-status'];
    a.setCookie = h['set-cookie'];
  });
  cdp.on('Network.loadingFailed', (e) => void (entry(e.requestId).failure = e.errorText));
  const toShop = () => [...byId.values()].filter((a) => a.url.startsWith('http://127.0.0.1:'));
  await page.goto(url);
  const deadline = Date.now() + SETTLE_MS;
  for (;;) {
    const settled = await page.evaluate(() => (window as unknown as { __settled: number }).__settled);
    const answered = toShop().filter((a) => a.status !== 0 && a.site !== undefined).length;
    if (settled >= embeds && answered >= embeds) break;
    if (Date.now() > deadline) {
      throw new Error(`after ${SETTLE_MS} ms only ${settled} of ${embeds} embeds settled and ${answered} were answered`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  await cdp.detach();
  return toShop();
}

// ---------------------------------------------------------------------------------------

describe("another site's page and the shop's visitor, in Chromium", () => {
  it("cannot get the visitor banned, queued, struck or their grant spent by embedding the shop", async () => {
    const origin = await startOrigin();
    const shop = await startShop(origin.url);
    const { context, page } = await newVisitor();

    // The visitor goes to the shop and is let straight in.
    await expectOnSite(page, `${shop.base}/`, '/');
    const cookie = await visitorCookie(context);
    expect(cookie).toBeDefined();

    // The other site's page, with a real grant of the visitor's (say it leaked into a
    // link) among the made-up and forged ones.
    const grant = mintGrant('visitors-own-grant-0001');
    const hostile = hostilePage(shop.base, grant);
    const answers = await underAttack(page, await startOtherSite(hostile.html), hostile.embeds);

    // Chromium did label them cross-site (127.0.0.2 and 127.0.0.1 are different sites),
    // and anteroom passed that on to the origin with the embeds it let through.
    expect(answers.length).toBe(hostile.embeds);
    expect(answers.filter((a) => a.site !== 'cross-site')).toEqual([]);
    const crossSiteAtOrigin = origin.seen.filter((s) => s.site === 'cross-site');
    expect(crossSiteAtOrigin.length).toBeGreaterThanOrEqual(IMAGES);
    expect(new Set(crossSiteAtOrigin.map((s) => s.dest))).toEqual(new Set(['image', 'script', 'iframe']));

    // No answer was a ban, a refusal or a place in line, and none gave out a cookie (an
    // embed never joins the line): every image came back as the image, the script and
    // the frame as themselves. The ban paths got the plain 404 and reached nobody.
    expect(answers.filter((a) => a.status === 429 || a.status === 403 || a.anteroom)).toEqual([]);
    expect(answers.filter((a) => a.setCookie?.includes('ar_visitor'))).toEqual([]);
    const pictures = answers.filter((a) => new URL(a.url).pathname === '/pic.png');
    expect(pictures.length).toBe(IMAGES);
    expect(pictures.filter((a) => a.status !== 200)).toEqual([]);
    expect(answers.find((a) => a.url.includes('/shop.js'))?.status).toBe(200);
    expect(answers.find((a) => a.url.includes('/cart?framed=1'))?.status).toBe(200);
    const banPaths = answers.filter((a) => /\/\.env\?|\/\.git\//.test(a.url));
    expect(banPaths.length).toBe(6);
    expect(banPaths.map((a) => a.status)).toEqual([404, 404, 404, 404, 404, 404]);
    expect(origin.seen.filter((s) => /^\/\.(env|git)/.test(s.url))).toEqual([]);

    // Nobody was struck or banned.
    expect(await bans(shop)).toEqual([]);
    const struck = await strikes(shop);
    expect(Object.keys(struck).length).toBeGreaterThan(0);
    expect(Object.values(struck).every((n) => n === 0), JSON.stringify(struck)).toBe(true);

    // The visitor keeps browsing the shop, as the same visitor.
    await expectOnSite(page, `${shop.base}/cart`, '/cart');
    expect(await visitorCookie(context)).toBe(cookie);
    // And their grant is still theirs: unspent, so their own use of it is honoured (a
    // spent one would be refused, 403), and the grant goes no further than anteroom.
    await expectOnSite(page, `${shop.base}/checkout?ar_grant=${grant}`, '/checkout');
    expect(await bans(shop)).toEqual([]);
  });

  it("control: the visitor's own navigation to a ban path does ban them", async () => {
    const origin = await startOrigin();
    const shop = await startShop(origin.url);
    const { page } = await newVisitor();
    await expectOnSite(page, `${shop.base}/`, '/');
    expect(await bans(shop)).toEqual([]);

    // From the shop's own page to /.env: Sec-Fetch-Site: same-origin, the visitor's act.
    const [answer] = await Promise.all([
      page.waitForResponse((r) => new URL(r.url()).pathname === '/.env'),
      page.evaluate(() => location.assign('/.env')),
    ]);
    await page.waitForURL(`${shop.base}/.env`);
    expect((await answer.request().allHeaders())['sec-fetch-site']).toBe('same-origin');
    expect(answer.status()).toBe(429);
    expect(answer.headers()['x-anteroom-status']).toBe('banned');

    // The admin API shows the ban, and the visitor's next request is answered by it.
    const list = await bans(shop);
    expect(bansLoopback(list), JSON.stringify(list)).toBe(true);
    expect(list.find((b) => b.target.startsWith('127.0.0.1'))?.source).toBe('ban_path');
    const next = await page.goto(`${shop.base}/cart`);
    expect(next!.status()).toBe(429);
    expect(next!.headers()['x-anteroom-status']).toBe('banned');
    expect(origin.seen.map((s) => s.url)).not.toContain('/cart');
  });

  // The protection switched off, as far as a test outside the binary can: the same page,
  // its requests to the shop sent through a proxy that strips `Sec-Fetch-*`. The flood and
  // the ban paths each ban the visitor on their own (so each half of the first test would
  // catch its protection missing): the flood by strikes (cookie-less images over the join
  // limit, forged grants), the ban paths at once.
  for (const [name, parts, source] of [
    ['the flood alone bans', { flood: true, banPaths: false }, 'automatic'],
    ['the ban paths alone ban', { flood: false, banPaths: true }, 'ban_path'],
  ] as const) {
    it(`control: with the fetch metadata stripped, ${name} the visitor`, async () => {
      const origin = await startOrigin();
      const shop = await startShop(origin.url);
      const { page } = await newVisitor();
      await expectOnSite(page, `${shop.base}/`, '/');

      // The proxy is on 127.0.0.1 too: the same site and the same cookies as the shop.
      const viaProxy = await startStrippingProxy(shop);
      const before = origin.seen.length;
      const hostile = hostilePage(viaProxy, mintGrant('visitors-own-grant-0002'), parts);
      const answers = await underAttack(page, await startOtherSite(hostile.html), hostile.embeds);
      // Chromium still sent them as cross-site; only anteroom no longer knows.
      expect(answers.length).toBe(hostile.embeds);
      expect(answers.filter((a) => a.site !== 'cross-site')).toEqual([]);
      expect(origin.seen.slice(before).filter((s) => s.site !== undefined)).toEqual([]);

      // The visitor is banned: the admin API shows it, some of the page's own requests
      // were already answered by the ban, and so is the visitor's next visit.
      const deadline = Date.now() + 10_000;
      let list = await bans(shop);
      while (!bansLoopback(list) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 100));
        list = await bans(shop);
      }
      expect(bansLoopback(list), JSON.stringify(list)).toBe(true);
      expect(list.find((b) => b.target.startsWith('127.0.0.1'))?.source).toBe(source);
      expect(answers.some((a) => a.anteroom === 'banned')).toBe(true);
      const struck = await strikes(shop);
      const total = Object.values(struck).reduce((a, b) => a + b, 0);
      if (parts.flood) expect(total, JSON.stringify(struck)).toBeGreaterThanOrEqual(20);
      const next = await page.goto(`${shop.base}/cart`);
      expect([403, 429]).toContain(next!.status());
      expect(next!.headers()['x-anteroom-status']).toBe('banned');
    });
  }
});
