// The waiting page in real headless Chromium, against a real anteroom binary built with
// the front-end, in front of a real origin. Screenshots go to test-artifacts/.
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import type { Browser, BrowserContextOptions, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN_TOKEN,
  ARTIFACTS,
  axeViolations,
  launchBrowser,
  startAnteroom,
  startOrigin,
  visit,
  type Anteroom,
  type OriginServer,
} from './harness';

let browser: Browser;
let origin: OriginServer;
let ar: Anteroom;

const PHONE: BrowserContextOptions = {
  viewport: { width: 390, height: 844 },
  deviceScaleFactor: 2,
  isMobile: true,
  hasTouch: true,
};
const DESKTOP: BrowserContextOptions = { viewport: { width: 1280, height: 800 } };

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  origin = await startOrigin();
  ar = await startAnteroom(origin.url);
  browser = await launchBrowser();
  // The still room lets its first visitor straight in; everyone after waits.
  const first = await visit(ar.port, 'localhost');
  expect(first.status).toBe(200);
  expect(String(first.body)).toContain('The shop');
});

afterAll(async () => {
  await browser?.close();
  await ar?.stop();
  await origin?.close();
});

/** A fresh visitor (own cookies) on a page that records console errors. */
async function newPage(options: BrowserContextOptions = DESKTOP): Promise<{ page: Page; errors: string[] }> {
  const context = await browser.newContext(options);
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  return { page, errors };
}

async function boardDigits(page: Page): Promise<string> {
  return page.$$eval('#ar-board .ar-flap', (flaps) =>
    flaps.map((f) => (f as HTMLElement).dataset.digit).join(''),
  );
}

describe('the waiting page in Chromium', () => {
  it('turns the board over live as the line moves, then goes to the address first asked for', async () => {
    // One straight in, then ten ahead of us in the moving room (1 admitted per second).
    expect((await visit(ar.port, '127.0.0.1')).status).toBe(200);
    for (let i = 0; i < 10; i++) {
      const r = await visit(ar.port, '127.0.0.1', '/');
      expect(r.headers['x-anteroom-status']).toBe('waiting');
    }
    const { page, errors } = await newPage(DESKTOP);
    const target = `${ar.moving}/shop/item?id=42&color=blue`;
    await page.goto(target);
    await page.waitForSelector('html.ar-js #ar-board .ar-flap');
    const start = await boardDigits(page);
    expect(Number(start)).toBeGreaterThan(1);
    expect(start.length).toBeGreaterThanOrEqual(2);
    // A marker that a navigation (reload) would wipe out.
    await page.evaluate(() => ((window as unknown as { __same: boolean }).__same = true));
    const flaps = await page.$$('#ar-board .ar-flap');
    await page.waitForFunction(
      (s) => [...document.querySelectorAll<HTMLElement>('#ar-board .ar-flap')].map((f) => f.dataset.digit).join('') !== s,
      start,
      { timeout: 15_000, polling: 50 },
    );
    // Caught mid-turn or just after: the same flap elements, updated in place.
    const now = await Promise.all(flaps.map((f) => f.evaluate((e) => (e as HTMLElement).dataset.digit)));
    expect(now.join('')).not.toBe(start);
    expect(Number(now.join(''))).toBeLessThan(Number(start));
    expect(await page.evaluate(() => (window as unknown as { __same?: boolean }).__same)).toBe(true);
    const flipped = await Promise.all(flaps.map((f) => f.evaluate((e) => Number((e as HTMLElement).dataset.flips ?? 0))));
    expect(flipped.some((n) => n > 0)).toBe(true);
    // Only changed digits turned: a digit that did not change has not flipped.
    [...start].forEach((d, i) => {
      if (d === now[i]) expect(flipped[i]).toBe(0);
    });
    expect(await page.textContent('#ar-live')).toContain(String(Number(now.join(''))));

    // Admitted: the page goes to the original path and query and shows the site.
    await page.waitForSelector('#origin-uri', { timeout: 30_000 });
    expect(page.url()).toBe(target);
    expect(await page.textContent('#origin-uri')).toBe('/shop/item?id=42&color=blue');
    expect(origin.requests).toContain('/shop/item?id=42&color=blue');
    expect(errors).toEqual([]);
    await page.context().close();
  });

  it('keeps moving with a meta refresh when JavaScript is off', async () => {
    const { page } = await newPage({ ...DESKTOP, javaScriptEnabled: false });
    await page.goto(`${ar.still}/`);
    const refresh = await page.$('meta[http-equiv="refresh"]');
    expect(refresh).not.toBeNull();
    expect(Number(await refresh!.getAttribute('content'))).toBeGreaterThanOrEqual(2);
    // The position is on the page with no script at all.
    expect(Number(await boardDigits(page))).toBeGreaterThanOrEqual(1);
    expect(await page.$('html.ar-js')).toBeNull();
    await page.screenshot({ path: path.join(ARTIFACTS, 'waiting-nojs-desktop.png') });
    await page.context().close();
  });

  it('speaks German to Accept-Language: de', async () => {
    const { page, errors } = await newPage({
      ...PHONE,
      locale: 'de-DE',
      extraHTTPHeaders: { 'Accept-Language': 'de-DE,de;q=0.9,en;q=0.5' },
    });
    await page.goto(`${ar.still}/`);
    await page.waitForSelector('html.ar-js');
    expect(await page.getAttribute('html', 'lang')).toBe('de');
    expect(await page.textContent('#ar-place-label')).toBe('Ihr Platz in der Warteschlange');
    expect(await page.textContent('main > .ar-note')).toContain('Lassen Sie diese Seite geöffnet');
    // The operator's title is shown as given.
    expect(await page.textContent('h1')).toBe('Sneaker drop');
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'waiting-de-phone.png'), fullPage: true });
    expect(errors).toEqual([]);
    await page.context().close();
  });

  it('passes axe-core with no serious or critical violations, and looks right on phone and desktop', async () => {
    for (const [name, options] of [
      ['phone', PHONE],
      ['desktop', DESKTOP],
    ] as const) {
      const { page, errors } = await newPage(options);
      await page.goto(`${ar.still}/`);
      await page.waitForSelector('html.ar-js #ar-board .ar-flap');
      expect(await page.getAttribute('html', 'lang')).toBe('en');
      expect(await page.getAttribute('#ar-live', 'aria-live')).toBe('polite');
      expect(await axeViolations(page)).toEqual([]);
      await page.screenshot({ path: path.join(ARTIFACTS, `waiting-${name}.png`), fullPage: true });
      expect(errors).toEqual([]);
      await page.context().close();
    }
    // Right to left, and in the dark.
    const { page } = await newPage({
      ...PHONE,
      colorScheme: 'dark',
      extraHTTPHeaders: { 'Accept-Language': 'ar' },
    });
    await page.goto(`${ar.still}/`);
    await page.waitForSelector('html.ar-js');
    expect(await page.getAttribute('html', 'dir')).toBe('rtl');
    expect(await page.getAttribute('html', 'lang')).toBe('ar');
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'waiting-ar-dark-phone.png'), fullPage: true });
    await page.context().close();
  });

  it("shows a waiting visitor their reference, the same as in the JSON answer and the admin's queue", async () => {
    for (const javaScriptEnabled of [true, false]) {
      const { page, errors } = await newPage({ ...PHONE, javaScriptEnabled });
      await page.goto(`${ar.still}/`);
      if (javaScriptEnabled) await page.waitForSelector('html.ar-js #ar-board .ar-flap');
      const shown = (await page.textContent('#ar-ref .ar-ref-code'))?.trim() ?? '';
      expect(shown).toMatch(/^[0-9A-Z]{8}$/);
      expect(await page.textContent('#ar-ref')).toBe(`Your reference: ${shown}`);
      // Small (under the body text's size), visible, and selectable as text for support.
      const style = await page.$eval('#ar-ref', (el) => {
        const code = el.querySelector('.ar-ref-code') as HTMLElement;
        const css = getComputedStyle(code);
        return {
          size: parseFloat(getComputedStyle(el).fontSize),
          body: parseFloat(getComputedStyle(document.body).fontSize),
          select: css.userSelect,
          visible: el.getBoundingClientRect().height > 0,
        };
      });
      expect(style.visible).toBe(true);
      expect(style.size).toBeLessThan(style.body);
      expect(style.select).not.toBe('none');
      if (javaScriptEnabled) {
        await page.dblclick('#ar-ref .ar-ref-code');
        expect(await page.evaluate(() => String(window.getSelection()).trim())).toBe(shown);
        expect(await axeViolations(page)).toEqual([]);
      }
      // (Without JavaScript the meta refresh reloads the page every few seconds: the same
      // reference again, so only what the page showed first is checked.)
      await page.screenshot({
        path: path.join(ARTIFACTS, `waiting-ref-${javaScriptEnabled ? 'js' : 'nojs'}-phone.png`),
        fullPage: true,
      });

      // The same visitor (their cookie) asking for JSON gets the same `ref`.
      const cookie = (await page.context().cookies()).find((c) => c.name === 'ar_visitor');
      expect(cookie).toBeDefined();
      const json = await visit(ar.port, 'localhost', '/', {
        accept: 'application/json',
        cookie: `ar_visitor=${cookie!.value}`,
      });
      expect(json.headers['x-anteroom-status']).toBe('waiting');
      expect(JSON.parse(String(json.body)).ref).toBe(shown);

      // Support finds them by it in the admin's queue, and in the head of the line.
      const api = (q: string) =>
        fetch(`${ar.moving}/__anteroom/admin/api/rooms/still/queue?${q}`, {
          headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
        }).then(async (r) => {
          expect(r.status).toBe(200);
          return (await r.json()) as { entries: { ref: string; position: number | null }[] };
        });
      const found = await api(`ref=${shown}`);
      expect(found.entries.map((e) => e.ref)).toEqual([shown]);
      const head = await api('limit=1000');
      expect(head.entries.map((e) => e.ref)).toContain(shown);
      expect(errors).toEqual([]);
      await page.context().close();
    }
  });

  it('turns digits over without animation when reduced motion is asked for', async () => {
    const { page } = await newPage({ ...DESKTOP, reducedMotion: 'reduce' });
    await page.goto(`${ar.still}/`);
    await page.waitForSelector('html.ar-js');
    expect(await page.evaluate(() => matchMedia('(prefers-reduced-motion: reduce)').matches)).toBe(true);
    expect(await page.$$eval('.ar-leaf', (ls) => ls.every((l) => getComputedStyle(l).display === 'none'))).toBe(true);
    await page.context().close();
  });

  it('serves fingerprinted, long-cached assets and stays under 30 KB compressed', async () => {
    const page = await visit(ar.port, 'localhost');
    expect(page.headers['x-anteroom-status']).toBe('waiting');
    const html = String(page.body);
    const assets = [...html.matchAll(/(?:src|href)="(\/__anteroom\/static\/[^"]+)"/g)].map((m) => m[1]);
    expect(assets.some((a) => a.endsWith('.js'))).toBe(true);
    expect(assets.some((a) => a.endsWith('.css'))).toBe(true);
    let total = gzipSync(page.body).length;
    for (const a of assets) {
      expect(a).toMatch(/-[A-Za-z0-9_-]{8}\.(js|css)$/);
      const r = await fetch(`${ar.moving}${a}`);
      expect(r.status).toBe(200);
      expect(r.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
      expect(r.headers.get('content-type')).toMatch(a.endsWith('.js') ? /^text\/javascript/ : /^text\/css/);
      total += gzipSync(Buffer.from(await r.arrayBuffer())).length;
    }
    expect(total).toBeLessThan(30 * 1024);
    console.log(`waiting page + assets: ${total} bytes gzipped`);
    expect((await fetch(`${ar.moving}/__anteroom/static/nope-12345678.js`)).status).toBe(404);
    expect((await fetch(`${ar.moving}/__anteroom/static/.vite/manifest.json`)).status).toBe(404);
  });
});
