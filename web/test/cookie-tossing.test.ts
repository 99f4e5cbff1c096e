// "A sibling subdomain cannot take a visitor's place or get them banned" (docs/security.md,
// cookie tossing), in real headless Chromium against the real anteroom binary.
//
// The shop is anteroom at http://shop.test:<port>; the hostile page is on a sibling,
// http://blog.shop.test:<port>, and sets an `ar_visitor` for the parent domain
// (`domain=shop.test`) with `document.cookie`, as any page on a subdomain may. Chromium maps
// both names to 127.0.0.1 (`--host-resolver-rules`). The tossed cookie has the shape of a
// real one and a MAC that does not verify: a sibling page cannot read the visitor's own
// (HttpOnly), so a forgery is what it has. It is set before the visitor's first visit to
// the shop, so Chromium sends it first, beside the visitor's own from then on.
//
// The visitor then waits in the shop's line and their page asks for their status again
// and again. They must keep one place (one reference) and never be banned; the one strike
// allowed is that of their first visit, when the tossed cookie was the only one. Control:
// the browser really holds both cookies and sends both to the shop's host, tossed first
// (read by an echo on another port of that host), so every status request below leads
// with the forgery; and the first visit's strike shows anteroom saw it.
import http from 'node:http';
import type net from 'node:net';
import path from 'node:path';
import type { Browser } from 'playwright-core';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ADMIN_TOKEN, CHROMIUM, CHROMIUM_FLAGS, freePort, spawnAnteroom, startOrigin } from './harness';

const SHOP = 'shop.test';
const SIBLING = `blog.${SHOP}`;
/** Status requests the visitor's page makes after its first visit: more than enough for
 * the four forged-cookie strikes (5 each) that would ban it if each were its own. */
const REQUESTS = 8;

let browser: Browser;
const cleanups: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [...CHROMIUM_FLAGS, `--host-resolver-rules=MAP ${SHOP} 127.0.0.1, MAP *.${SHOP} 127.0.0.1`],
  });
});

afterAll(async () => {
  await browser?.close();
  for (const stop of cleanups.reverse()) await stop().catch(() => undefined);
});

/** A plain GET from Node (not the browser): status, headers, body. */
function get(url: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
  });
}

it('a cookie tossed by a sibling subdomain takes no place and bans nobody', async () => {
  const origin = await startOrigin();
  cleanups.push(() => origin.close());
  const adminPort = await freePort();
  const shop = await spawnAnteroom(
    (dir, port) => `listen: "127.0.0.1:${port}"
admin_listen: "127.0.0.1:${adminPort}"
admit_interval: 100ms
cookie_secret: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
admin_token: "${ADMIN_TOKEN}"
data_dir: "${path.join(dir, 'data')}"
abuse:
  strikes: 20
  window: 1m
  cooldown: 10m
rooms:
  shop:
    origin: ${origin.url}
    rate: 0.01
    max_active: 1
`,
  );
  cleanups.push(() => shop.stop());
  const shopUrl = `http://${SHOP}:${shop.port}/`;

  // Someone on the site (from Node), so the browser's visitor waits in line.
  expect((await get(`http://127.0.0.1:${shop.port}/`)).status).toBe(200);
  // A cookie of the real shape (another newcomer's), its MAC altered: the forgery.
  const other = await get(`http://127.0.0.1:${shop.port}/`, { accept: 'application/json' });
  const real = /ar_visitor=([^;]+)/.exec(String(other.headers['set-cookie']))?.[1];
  expect(real).toBeTruthy();
  // A character in the middle of the MAC, not the last, whose spare bits would make the
  // cookie malformed instead of forged.
  const at = real!.length - 10;
  const tossed = real!.slice(0, at) + (real![at] === 'A' ? 'B' : 'A') + real!.slice(at + 1);

  // The sibling's page, served on a port of its own.
  const sibling = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(
      `<!doctype html><html lang="en"><head><title>The blog</title></head><body><h1>The blog</h1>` +
        `<script>document.cookie = "ar_visitor=${tossed}; domain=${SHOP}; path=/"; window.__tossed = true;</script></body></html>`,
    );
  });
  await new Promise<void>((r) => sibling.listen(0, '127.0.0.1', r));
  cleanups.push(() => new Promise((r) => sibling.close(() => r(undefined))));
  const siblingPort = (sibling.address() as net.AddressInfo).port;

  const context = await browser.newContext();
  cleanups.push(() => context.close());
  const page = await context.newPage();
  await page.goto(`http://${SIBLING}:${siblingPort}/`);
  expect(await page.evaluate(() => (window as unknown as { __tossed?: boolean }).__tossed)).toBe(true);

  // The visitor's first visit to the shop: the tossed cookie is all the browser has.
  const first = await page.goto(shopUrl);
  expect(first?.status()).toBeLessThan(400);
  const jar = (await context.cookies(shopUrl)).filter((c) => c.name === 'ar_visitor');
  expect(jar.map((c) => c.domain).sort(), 'the browser holds the tossed cookie and its own').toEqual(
    [SHOP, `.${SHOP}`].sort(),
  );

  // Control: what Chromium sends to the shop's host, read by an echo on another port of
  // it (cookies do not depend on the port): both cookies, the tossed one first, so the
  // first `ar_visitor` of every request below is the forgery.
  const echo = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(req.headers.cookie ?? '');
  });
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
  cleanups.push(() => new Promise((r) => echo.close(() => r(undefined))));
  const echoPage = await context.newPage();
  await echoPage.goto(`http://${SHOP}:${(echo.address() as net.AddressInfo).port}/`);
  const sent = (await echoPage.evaluate(() => document.body.innerText))
    .split(';')
    .map((c) => c.trim())
    .filter((c) => c.startsWith('ar_visitor='));
  expect(sent.length, sent.join('; ')).toBe(2);
  expect(sent[0]).toBe(`ar_visitor=${tossed}`);

  // Their page asks for their status, as its live updates would.
  const answers: { status: number; ref?: string; position?: number }[] = [];
  for (let i = 0; i < REQUESTS; i++) {
    answers.push(
      await page.evaluate(async () => {
        const r = await fetch('/', { headers: { accept: 'application/json' }, credentials: 'same-origin' });
        const body = (await r.json().catch(() => ({}))) as { ref?: string; position?: number };
        return { status: r.status, ref: body.ref, position: body.position };
      }),
    );
  }
  expect(answers.map((a) => a.status)).toEqual(Array(REQUESTS).fill(200));
  const refs = new Set(answers.map((a) => a.ref));
  expect(refs.size, `one place throughout: ${JSON.stringify(answers)}`).toBe(1);
  expect([...refs][0]).toMatch(/^[A-Z0-9]{8}$/);

  // Nobody banned, and at most the first visit's strike.
  const admin = (p: string) =>
    get(`http://127.0.0.1:${adminPort}${p}`, { authorization: `Bearer ${ADMIN_TOKEN}` });
  const bans = JSON.parse((await admin('/__anteroom/admin/api/bans?limit=100')).body) as { bans: unknown[] };
  expect(bans.bans).toEqual([]);
  const metrics = (await admin('/metrics')).body;
  const struck = Number(/^anteroom_strikes_total\{reason="bad_cookie"\} (\d+)/m.exec(metrics)?.[1] ?? 0);
  expect(struck, 'the first visit, when the forgery was all the browser had').toBe(1);
});
