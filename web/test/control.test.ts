// The control room in real headless Chromium, against a real anteroom binary built with
// the front-end: sign in, read the rooms, change settings, pause, resume, empty the queue,
// ban and unban from the Bans view, add, edit and delete a room's events (the phase on the
// tile following them), and read every change back through the admin API. Screenshots go
// to test-artifacts/.
import { mkdirSync } from 'node:fs';
import path from 'node:path';
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

const DESKTOP: BrowserContextOptions = { viewport: { width: 1440, height: 900 } };
const CONTROL = '/__anteroom/admin/';
/** The room that lets one visitor in, then holds everyone (rate 0.01 per second). */
const STILL = 'still';
/** The room that admits one per second. */
const MOVING = 'moving';

interface RoomView {
  room: string;
  waiting: number;
  rate: number;
  max_active: number;
  paused: boolean;
}

/** The admin API, read as a script would: the bearer token, no browser. */
async function api(pathname: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${ar.moving}/__anteroom/admin/api${pathname}`, {
    ...init,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(init.headers ?? {}) },
  });
}

async function room(name: string): Promise<RoomView> {
  const r = await api(`/rooms/${name}/stats`);
  expect(r.status).toBe(200);
  return (await r.json()) as RoomView;
}

/** Waits until `check` holds for what the API says about `name` (the stats cache is
 * refreshed every second). */
async function eventually(name: string, check: (r: RoomView) => boolean, ms = 5000): Promise<RoomView> {
  const deadline = Date.now() + ms;
  for (;;) {
    const r = await room(name);
    if (check(r)) return r;
    if (Date.now() > deadline) throw new Error(`room ${name} never matched: ${JSON.stringify(r)}`);
    await new Promise((res) => setTimeout(res, 100));
  }
}

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

async function signIn(page: Page, token = ADMIN_TOKEN): Promise<void> {
  await page.goto(`${ar.moving}${CONTROL}`);
  await page.getByLabel('Admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

const tile = (page: Page, name: string) => page.locator(`section[data-room="${name}"]`);

async function openView(page: Page, name: 'Rooms' | 'Queue' | 'Bans'): Promise<void> {
  await page.getByRole('navigation', { name: 'Views' }).getByRole('button', { name, exact: true }).click();
}

interface BanView {
  target: string;
  source: string;
  reason: string;
  remaining_secs: number | null;
  permanent: boolean;
}

interface BanLogView {
  action: string;
  target: string;
  reason: string;
}

async function activeBans(): Promise<BanView[]> {
  const r = await api('/bans?limit=1000');
  expect(r.status).toBe(200);
  return ((await r.json()) as { bans: BanView[] }).bans;
}

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  origin = await startOrigin();
  ar = await startAnteroom(origin.url);
  browser = await launchBrowser();
  // The still room lets its first visitor straight in; the next five wait.
  expect((await visit(ar.port, 'localhost')).status).toBe(200);
  for (let i = 0; i < 5; i++) {
    expect((await visit(ar.port, 'localhost')).headers['x-anteroom-status']).toBe('waiting');
  }
  await eventually(STILL, (r) => r.waiting === 5);
});

afterAll(async () => {
  await browser?.close();
  await ar?.stop();
  await origin?.close();
});

describe('the control room in Chromium', () => {
  it('refuses a wrong token with a clear error and keeps nothing', async () => {
    const { page, errors } = await newPage();
    await signIn(page, 'not-the-admin-token');
    const alert = page.locator('#cr-token-error');
    await alert.waitFor();
    expect(await alert.getAttribute('role')).toBe('alert');
    expect(await alert.textContent()).toContain('That token was refused (Wrong admin token)');
    expect(await page.getAttribute('#cr-token', 'aria-invalid')).toBe('true');
    expect(await page.locator('section[data-room]').count()).toBe(0);
    expect(await page.evaluate(() => sessionStorage.length + localStorage.length)).toBe(0);
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-signin-refused.png') });
    // The browser logs the 401 itself; nothing else may go wrong.
    expect(errors.filter((e) => !e.includes('401'))).toEqual([]);
    await page.context().close();
  });

  it('signs in with the token, shows every room live, and keeps the token in sessionStorage only', async () => {
    const { page, errors } = await newPage();
    await signIn(page);
    await tile(page, STILL).waitFor();
    await tile(page, MOVING).waitFor();
    expect(await tile(page, STILL).locator('h3').textContent()).toBe(STILL);
    await page.waitForFunction(
      () => document.querySelector('section[data-room="still"] [data-stat="waiting"]')?.textContent === '5',
    );
    expect(await tile(page, STILL).locator('[data-stat="active"]').textContent()).toBe('1 / 1,000');
    expect(await tile(page, STILL).locator('.cr-sub').textContent()).toBe('limit 0.01/s');
    // The origin in-flight cap and the queue breaker, where set (the moving room) only.
    expect(await tile(page, MOVING).locator('[data-stat="inflight"]').textContent()).toBe(
      'Origin: 0 of 8 in flight (this replica)',
    );
    expect(await tile(page, MOVING).locator('[data-stat="breaker"]').textContent()).toBe('Line capped at 10,000 (breaker)');
    expect(await tile(page, STILL).locator('.cr-limits').count()).toBe(0);
    // The sparkline fills up as the page polls (one reading a second).
    await page.waitForFunction(
      () => Number(document.querySelector('section[data-room="still"] svg')?.getAttribute('data-samples')) >= 3,
      undefined,
      { timeout: 10_000 },
    );
    expect(await tile(page, STILL).locator('svg path.cr-spark-line').getAttribute('d')).toMatch(/^M[\d.]+ [\d.]+ L/);
    expect(await page.locator('.cr-store').textContent()).toContain('Store (embedded): up');
    const stored = await page.evaluate(() => ({
      session: sessionStorage.getItem('anteroom.admin_token'),
      local: localStorage.length,
      cookie: document.cookie,
    }));
    expect(stored).toEqual({ session: ADMIN_TOKEN, local: 0, cookie: '' });
    // A reload keeps the session (same tab).
    await page.reload();
    await tile(page, STILL).waitFor();
    // Signing out forgets the token.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('Admin token').waitFor();
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
    expect(errors).toEqual([]);
    await page.context().close();
  });

  it('changes the rate through the form, and shows field errors from the API inline', async () => {
    const { page, errors } = await newPage();
    await signIn(page);
    const moving = tile(page, MOVING);
    await moving.waitFor();
    const rate = moving.getByLabel('Rate (admitted per second)');
    await rate.fill('7.5');
    await moving.getByRole('button', { name: 'Apply' }).click();
    await moving.getByText('Applied rate 1 → 7.5/s').waitFor();
    // The API's counters come from the one-second cache: the new rate shows within a second.
    await eventually(MOVING, (r) => r.rate === 7.5);
    await page.waitForFunction(
      () => document.querySelector('section[data-room="moving"] .cr-sub')?.textContent === 'limit 7.5/s',
    );

    // A negative rate: the API refuses it and names the field; the form says so next to
    // the field, and nothing changes.
    await rate.fill('-3');
    await moving.getByRole('button', { name: 'Apply' }).click();
    const rateError = moving.locator('[data-field-error="rate"]');
    await rateError.waitFor();
    expect(await rateError.textContent()).toMatch(/nothing was changed/);
    expect(await rate.getAttribute('aria-invalid')).toBe('true');
    expect(await rate.getAttribute('aria-describedby')).toBe(await rateError.getAttribute('id'));
    expect(await page.evaluate(() => document.activeElement?.getAttribute('name'))).toBe('rate');
    // Text that is not a number goes to the API as typed; it names the field too.
    await rate.fill('fast');
    await moving.getByRole('button', { name: 'Apply' }).click();
    await page.waitForFunction(() =>
      document.querySelector('section[data-room="moving"] [data-field-error="rate"]')?.textContent?.includes('fast'),
    );
    await moving.getByRole('button', { name: 'Reset' }).click();
    expect(await rate.inputValue()).toBe('7.5');

    const max = moving.getByLabel('Max on the site');
    await max.fill('0');
    await moving.getByRole('button', { name: 'Apply' }).click();
    await moving.locator('[data-field-error="max_active"]').waitFor();
    expect(await max.getAttribute('aria-invalid')).toBe('true');
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-field-error.png'), fullPage: true });
    await max.fill('250');
    await moving.getByRole('button', { name: 'Apply' }).click();
    await moving.getByText('max on the site 1,000 → 250').waitFor();
    const after = await eventually(MOVING, (r) => r.max_active === 250);
    expect(after.rate).toBe(7.5);
    // The browser logs the refused PUTs (400) itself.
    expect(errors.filter((e) => !e.includes('400'))).toEqual([]);
    await page.context().close();
  });

  it('changes the other settings in the settings editor, with the API naming a bad one', async () => {
    const { page, errors } = await newPage();
    await signIn(page);
    const still = tile(page, STILL);
    await still.waitFor();
    await still.getByText('All settings').click();
    const title = still.getByLabel('Page title');
    await title.waitFor();
    await title.fill('The spring drop');
    await still.getByLabel('Waiting page status').selectOption('429');
    await still.getByLabel('Bypass paths (one glob a line)').fill('/health/*\n/webhooks/*');
    await still.getByLabel('Max requests at the origin (per replica, 0: no cap)').fill('12');
    await still.getByLabel('Draw by lot before the doors open').check();
    await still.getByRole('button', { name: 'Apply settings' }).click();
    await still.getByText(/^Applied .*title.*: in force now\./).waitFor();
    const settings = (await (await api(`/rooms/${STILL}/config`)).json()) as Record<string, unknown>;
    expect(settings.title).toBe('The spring drop');
    expect(settings.queue_status_code).toBe(429);
    expect(settings.bypass_paths).toEqual(['/health/*', '/webhooks/*']);
    expect(settings.max_inflight).toBe(12);
    expect(settings.lottery).toBe(true);
    expect(settings.changed).toEqual(
      expect.arrayContaining(['title', 'queue_status_code', 'bypass_paths', 'max_inflight', 'lottery']),
    );
    // The next waiting visitor's page carries the new title and status (the first
    // visitor of the room, if none came yet, goes in).
    await fetch(`${ar.still}/anything`);
    const visitorPage = await fetch(`${ar.still}/anything`);
    expect(visitorPage.status).toBe(429);
    expect(await visitorPage.text()).toContain('The spring drop');
    await still.getByText('changed from the file').first().waitFor();

    // A duration the file would refuse: the API names the field, the editor shows it there.
    const wait = still.getByLabel('Wait for an origin slot (e.g. 5s)');
    await wait.fill('soon');
    await still.getByRole('button', { name: 'Apply settings' }).click();
    const waitError = still.locator('[data-field-error="inflight_wait"]');
    await waitError.waitFor();
    expect(await waitError.textContent()).toMatch(/duration/);
    expect(await wait.getAttribute('aria-invalid')).toBe('true');
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-settings-editor.png'), fullPage: true });
    const unchanged = (await (await api(`/rooms/${STILL}/config`)).json()) as Record<string, unknown>;
    expect(unchanged.inflight_wait).toBe('5s');
    // The proof of work at the door, switched from its own select (the mode only).
    await wait.fill('5s');
    await still.getByLabel('Proof of work at the door').selectOption('under_load');
    await still.getByRole('button', { name: 'Apply settings' }).click();
    await still.getByText(/^Applied challenge: in force now\./).waitFor();
    const door = (await (await api(`/rooms/${STILL}/config`)).json()) as {
      challenge: { mode: string; no_js_wait: string };
      changed: string[];
    };
    expect(door.challenge.mode).toBe('under_load');
    expect(door.challenge.no_js_wait).toBe('20s');
    expect(door.changed).toContain('challenge');
    // Put the room back as the other tests expect it.
    const back = await api(`/rooms/${STILL}/config`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        title: null,
        queue_status_code: null,
        bypass_paths: null,
        max_inflight: null,
        lottery: null,
        challenge: null,
      }),
    });
    expect(back.status).toBe(200);
    // The browser logs the refused PUT (422) itself.
    expect(errors.filter((e) => !e.includes('422'))).toEqual([]);
    await page.context().close();
  });

  it('pauses and resumes a room', async () => {
    const { page, errors } = await newPage();
    await signIn(page);
    const still = tile(page, STILL);
    await still.waitFor();
    await still.getByRole('button', { name: 'Pause admissions' }).click();
    await still.getByText('Paused: nobody is admitted until you resume.').waitFor();
    await still.locator('[data-testid="paused-badge"]').waitFor();
    await eventually(STILL, (r) => r.paused);
    await still.getByRole('button', { name: 'Resume admissions' }).click();
    await still.getByText('Resumed: admitting again.').waitFor();
    await eventually(STILL, (r) => !r.paused);
    await still.getByRole('button', { name: 'Pause admissions' }).waitFor();
    expect(await still.locator('[data-testid="paused-badge"]').count()).toBe(0);
    expect(errors).toEqual([]);
    await page.context().close();
  });

  it('shows the head of the line in the Queue view, finds a visitor by ref and moves them to the front', async () => {
    // Held, so the line stands still while the test reads it.
    expect((await api(`/rooms/${STILL}/pause`, { method: 'POST' })).status).toBe(200);
    for (let i = 0; i < 3; i++) {
      expect((await visit(ar.port, 'localhost')).headers['x-anteroom-status']).toBe('waiting');
    }
    const before = (await (await api(`/rooms/${STILL}/queue`)).json()) as {
      entries: { ref: string; position: number }[];
    };
    expect(before.entries.length).toBeGreaterThanOrEqual(3);
    const last = before.entries[before.entries.length - 1];
    expect(last.position).toBe(before.entries.length);

    const { page, errors } = await newPage();
    await signIn(page);
    await tile(page, STILL).waitFor();
    await page.getByRole('navigation', { name: 'Views' }).getByRole('button', { name: 'Queue', exact: true }).click();
    const panel = page.locator(`section[data-queue="${STILL}"]`);
    const row = panel.locator(`tr[data-ref="${last.ref}"]`);
    await row.waitFor();
    expect(await row.locator('[data-col="position"]').textContent()).toBe(String(last.position));
    expect(await panel.locator('tbody tr').count()).toBe(before.entries.length);

    // Searching by ref, as typed (lower case), shows just that visitor.
    await panel.getByLabel('Find a visitor by ref').fill(last.ref.toLowerCase());
    await panel.getByRole('button', { name: 'Find', exact: true }).click();
    await page.waitForFunction(
      (room) => document.querySelectorAll(`section[data-queue="${room}"] tbody tr`).length === 1,
      STILL,
    );
    await row.waitFor();
    // An unknown ref says so.
    await panel.getByLabel('Find a visitor by ref').fill('ZZZZ-ZZZZ');
    await panel.getByRole('button', { name: 'Find', exact: true }).click();
    await panel.getByText('Nobody waiting in still has the reference ZZZZZZZZ.').waitFor();
    await panel.getByLabel('Find a visitor by ref').fill(last.ref);
    await panel.getByRole('button', { name: 'Find', exact: true }).click();
    await row.waitFor();

    // Move to front asks first; cancelling changes nothing.
    await row.getByRole('button', { name: `Move to front ${last.ref}` }).click();
    await row.getByText(`Move ${last.ref} to position 1?`).waitFor();
    await row.getByRole('button', { name: 'Cancel' }).click();
    const unmoved = (await (await api(`/rooms/${STILL}/queue?ref=${last.ref}`)).json()) as {
      entries: { position: number }[];
    };
    expect(unmoved.entries[0].position).toBe(last.position);
    await row.getByRole('button', { name: `Move to front ${last.ref}` }).click();
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-queue-confirm.png') });
    await row.getByRole('button', { name: 'Confirm move' }).click();
    await panel.getByText(`Moved ${last.ref} to position 1.`).waitFor();

    // The API agrees: position 1, at the head of the line.
    const moved = (await (await api(`/rooms/${STILL}/queue?ref=${last.ref}`)).json()) as {
      entries: { ref: string; position: number }[];
    };
    expect(moved.entries).toHaveLength(1);
    expect(moved.entries[0].position).toBe(1);
    const after = (await (await api(`/rooms/${STILL}/queue?limit=1`)).json()) as { entries: { ref: string }[] };
    expect(after.entries[0].ref).toBe(last.ref);
    // Back to the head of the line: the moved visitor is listed first.
    await panel.getByRole('button', { name: 'Show the head of the line' }).click();
    await page.waitForFunction(
      ([room, ref]) => document.querySelector(`section[data-queue="${room}"] tbody tr`)?.getAttribute('data-ref') === ref,
      [STILL, last.ref],
    );
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-queue.png'), fullPage: true });
    expect((await api(`/rooms/${STILL}/resume`, { method: 'POST' })).status).toBe(200);
    expect(errors).toEqual([]);
    await page.context().close();
  });

  it('empties the queue only after the room name is typed', async () => {
    // Held, so nobody leaves the line on their own while the test counts it.
    expect((await api(`/rooms/${STILL}/pause`, { method: 'POST' })).status).toBe(200);
    const { waiting } = await eventually(STILL, (r) => r.paused);
    expect(waiting).toBeGreaterThanOrEqual(4);
    const { page, errors } = await newPage();
    await signIn(page);
    const still = tile(page, STILL);
    await page.waitForFunction(
      (n) => document.querySelector('section[data-room="still"] [data-stat="waiting"]')?.textContent === String(n),
      waiting,
    );
    // Cancelling changes nothing.
    await still.getByRole('button', { name: 'Empty the queue…' }).click();
    let dialog = page.getByRole('dialog');
    await dialog.waitFor();
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await dialog.waitFor({ state: 'detached' });
    expect((await room(STILL)).waiting).toBe(waiting);

    await still.getByRole('button', { name: 'Empty the queue…' }).click();
    dialog = page.getByRole('dialog');
    await dialog.waitFor();
    expect(await dialog.textContent()).toContain(`removes all ${waiting} visitors`);
    const confirm = dialog.getByRole('button', { name: 'Empty the queue', exact: true });
    expect(await confirm.isDisabled()).toBe(true);
    const typed = dialog.getByLabel('Type the room name');
    // The confirmation input has the focus, and a wrong name does not arm the button.
    expect(await page.evaluate(() => document.activeElement?.id)).toBe(await typed.getAttribute('id'));
    await typed.fill('stil');
    expect(await confirm.isDisabled()).toBe(true);
    await typed.fill(STILL);
    expect(await confirm.isDisabled()).toBe(false);
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-flush-confirm.png') });
    await confirm.click();
    await still.getByText(`Emptied the queue: removed ${waiting} visitors from the line.`).waitFor();
    expect(await page.getByRole('dialog').count()).toBe(0);
    await eventually(STILL, (r) => r.waiting === 0);
    await page.waitForFunction(
      () => document.querySelector('section[data-room="still"] [data-stat="waiting"]')?.textContent === '0',
    );
    expect((await api(`/rooms/${STILL}/resume`, { method: 'POST' })).status).toBe(200);
    expect(errors).toEqual([]);
    await page.context().close();
  });

  it('bans a range from the Bans view, shows a refused range inline, and unbans it after confirming', async () => {
    const target = '192.0.2.0/24';
    const reason = 'scraper storm at the drop';
    const { page, errors } = await newPage();
    await signIn(page);
    await tile(page, STILL).waitFor();
    await openView(page, 'Bans');
    const bans = page.getByTestId('active-bans');
    const log = page.getByTestId('ban-log');
    await bans.getByRole('heading', { name: 'Active bans' }).waitFor();
    expect(await page.getByRole('navigation', { name: 'Views' }).getByRole('button', { name: 'Bans' }).getAttribute('aria-current')).toBe('page');

    // Ban the range for an hour, with a reason.
    const form = page.getByRole('form', { name: 'Ban an address or range' });
    await form.getByLabel('Address or range').fill(target);
    await form.getByLabel('Duration').fill('1h');
    await form.getByLabel('Reason').fill(reason);
    await form.getByRole('button', { name: 'Ban', exact: true }).click();
    await page.getByText(`Banned ${target} for 1 h 00 min.`).waitFor();
    const row = bans.locator(`tr[data-target="${target}"]`);
    await row.waitFor();
    expect(await row.locator('[data-col="reason"]').textContent()).toBe(reason);
    expect(await row.locator('[data-col="source"]').textContent()).toBe('admin');
    // The time left counts down, second by second.
    const left = row.locator('[data-col="left"]');
    expect(await left.textContent()).toMatch(/^(1 h 00 min|59 min \d\d s)$/);
    await page.waitForFunction(
      (t) => /^59 min 5\d s$/.test(document.querySelector(`tr[data-target="${t}"] [data-col="left"]`)?.textContent ?? ''),
      target,
      { timeout: 5000 },
    );
    const shown = await left.textContent();
    await page.waitForFunction(
      ([t, before]) => document.querySelector(`tr[data-target="${t}"] [data-col="left"]`)?.textContent !== before,
      [target, shown],
      { timeout: 5000 },
    );
    // The API agrees: an admin ban of the range, with an hour left.
    const made = (await activeBans()).find((b) => b.target === target);
    expect(made).toMatchObject({ source: 'admin', reason, permanent: false });
    expect(made?.remaining_secs).toBeGreaterThan(3500);
    expect(made?.remaining_secs).toBeLessThanOrEqual(3600);
    // …and the page's countdown is the server's, to the second.
    const [, mins, secs] = /^(\d+) min (\d\d) s$/.exec((await left.textContent()) ?? '') ?? [];
    expect(Math.abs(Number(mins) * 60 + Number(secs) - (made?.remaining_secs ?? 0))).toBeLessThanOrEqual(1);

    // A range broader than /8: the API's 422 names the target, shown under the field, and
    // nothing is banned.
    const targetInput = form.getByLabel('Address or range');
    await targetInput.fill('192.0.0.0/4');
    await form.getByRole('button', { name: 'Ban', exact: true }).click();
    const targetError = form.locator('[data-field-error="target"]');
    await targetError.waitFor();
    expect(await targetError.textContent()).toContain('broader than /8');
    expect(await targetError.textContent()).toMatch(/nothing was changed/);
    expect(await targetInput.getAttribute('aria-invalid')).toBe('true');
    expect((await targetInput.getAttribute('aria-describedby'))?.split(' ')).toContain(await targetError.getAttribute('id'));
    expect(await page.evaluate(() => document.activeElement?.getAttribute('name'))).toBe('target');
    expect((await activeBans()).map((b) => b.target)).not.toContain('192.0.0.0/4');
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-bans-field-error.png'), fullPage: true });
    // Typing again clears the error.
    await targetInput.fill('');
    expect(await targetError.count()).toBe(0);

    // Unban asks first; cancelling changes nothing.
    await row.getByRole('button', { name: `Unban ${target}` }).click();
    await row.getByText(`Lift the ban on ${target}?`).waitFor();
    // The confirmation has the focus; after Cancel it is back on Unban, so the keyboard
    // can ask again.
    await page.waitForFunction(() => document.activeElement?.textContent === 'Confirm unban');
    await row.getByRole('button', { name: 'Cancel' }).click();
    expect((await activeBans()).map((b) => b.target)).toContain(target);
    await page.waitForFunction(() => document.activeElement?.getAttribute('data-action') === 'unban');
    await page.keyboard.press('Enter');
    await row.getByRole('button', { name: 'Confirm unban' }).waitFor();
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-bans-confirm.png'), fullPage: true });
    await row.getByRole('button', { name: 'Confirm unban' }).click();
    await bans.getByText(`Lifted the ban on ${target}.`).waitFor();
    await row.waitFor({ state: 'detached' });
    expect((await activeBans()).map((b) => b.target)).not.toContain(target);

    // The log has the ban and the unban, newest first, on the page and through the API.
    await log.locator(`tr[data-action="unbanned"][data-target="${target}"]`).waitFor();
    const logged = await log
      .locator('tbody tr')
      .evaluateAll((rows) => rows.map((r) => `${r.getAttribute('data-action')} ${r.getAttribute('data-target')}`));
    expect(logged.slice(0, 2)).toEqual([`unbanned ${target}`, `banned ${target}`]);
    expect(await log.locator(`tr[data-action="banned"][data-target="${target}"]`).textContent()).toContain(reason);
    const apiLog = (await (await api('/bans/log?limit=2')).json()) as { log: BanLogView[] };
    expect(apiLog.log.map((e) => `${e.action} ${e.target}`)).toEqual([`unbanned ${target}`, `banned ${target}`]);
    expect(apiLog.log[1].reason).toBe(reason);
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-bans.png'), fullPage: true });
    // The browser logs the refused POST (422) itself.
    expect(errors.filter((e) => !e.includes('422'))).toEqual([]);
    await page.context().close();
  });

  it('pages the ban log with Older and Newer, and shows permanent bans (light)', async () => {
    // 22 bans (one permanent) and one unban: more than a page of the log (20).
    for (let i = 1; i <= 22; i++) {
      const r = await api('/bans', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ target: `198.51.100.${i}`, duration_secs: i === 22 ? null : 600, reason: `probe ${i}` }),
      });
      expect(r.status).toBe(201);
    }
    expect((await api(`/bans/${encodeURIComponent('198.51.100.1/32')}`, { method: 'DELETE' })).status).toBe(200);
    // Lifting a ban that is not there is a 404.
    expect((await api(`/bans/${encodeURIComponent('198.51.100.1')}`, { method: 'DELETE' })).status).toBe(404);

    const { page, errors } = await newPage({ ...DESKTOP, colorScheme: 'light' });
    await signIn(page);
    await openView(page, 'Bans');
    const bans = page.getByTestId('active-bans');
    const log = page.getByTestId('ban-log');
    const permanent = bans.locator('tr[data-target="198.51.100.22/32"]');
    await permanent.waitFor();
    expect(await permanent.locator('[data-col="left"]').textContent()).toBe('permanent');
    expect(await bans.locator('tr[data-target="198.51.100.1/32"]').count()).toBe(0);

    await log.locator('tr[data-action="unbanned"][data-target="198.51.100.1/32"]').waitFor();
    expect(await log.locator('tbody tr').count()).toBe(20);
    const pager = page.getByRole('navigation', { name: 'Ban log pages' });
    expect(await pager.getByRole('button', { name: 'Newer' }).isDisabled()).toBe(true);
    await pager.getByRole('button', { name: 'Older' }).click();
    await pager.getByText('page 2').waitFor();
    // The oldest of the 22 is on the second page.
    await log.locator('tr[data-action="banned"][data-target="198.51.100.1/32"]').waitFor();
    expect(await log.locator('tr[data-target="198.51.100.22/32"]').count()).toBe(0);
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-bans-log-older-light.png'), fullPage: true });
    await pager.getByRole('button', { name: 'Newer' }).click();
    await log.locator('tr[data-target="198.51.100.22/32"]').waitFor();

    for (let i = 2; i <= 22; i++) {
      expect((await api(`/bans/${encodeURIComponent(`198.51.100.${i}/32`)}`, { method: 'DELETE' })).status).toBe(200);
    }
    await bans.getByTestId('no-bans').waitFor();
    expect(errors).toEqual([]);
    await page.context().close();
  });

  it('sends you back to sign in when the API stops taking the token', async () => {
    const { page } = await newPage();
    await page.goto(`${ar.moving}${CONTROL}`);
    // As if the token had been rotated since this tab signed in.
    await page.evaluate(() => sessionStorage.setItem('anteroom.admin_token', 'rotated-away-token'));
    await page.reload();
    const notice = page.getByText('Signed out: the server refused the admin token (Wrong admin token)');
    await notice.waitFor();
    await page.getByLabel('Admin token').waitFor();
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
    await page.context().close();
  });

  it('shows loud banners for a store outage, fail-open and a lost connection', async () => {
    const { page } = await newPage();
    await signIn(page);
    await tile(page, STILL).waitFor();
    // The embedded store cannot be taken down from outside, so the status the API would
    // report during a long outage with fail-open on is played to the page.
    const real = await (await api('/status')).json();
    await page.route('**/__anteroom/admin/api/status', (route) =>
      route.fulfill({
        status: 200,
        contentType: 'application/json',
        body: JSON.stringify({
          ...real,
          store: { kind: 'redis', up: false, down_for_secs: 95.4 },
          fail_open: { enabled: true, after_secs: 30, active: true },
        }),
      }),
    );
    const store = page.locator('[data-banner="cr-banner-store"]');
    await store.waitFor();
    expect(await store.getAttribute('role')).toBe('alert');
    expect(await store.locator('h2').textContent()).toBe('Queue store (redis) down for 1 min 35 s');
    const failOpen = page.locator('[data-banner="cr-banner-failopen"]');
    expect(await failOpen.locator('h2').textContent()).toBe('FAIL-OPEN: everyone is let straight in');
    expect(await failOpen.textContent()).toContain('longer than 30 s');
    expect(await page.locator('.cr-store').textContent()).toContain('DOWN');
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-outage-banners.png') });

    // anteroom itself unreachable: the numbers are marked stale, with how long.
    await page.route('**/__anteroom/admin/api/rooms', (route) => route.abort('connectionrefused'));
    const conn = page.locator('[data-banner="cr-banner-conn"]');
    await conn.waitFor();
    expect(await conn.locator('h2').textContent()).toMatch(/^Cannot read anteroom for \d+ s$/);
    await tile(page, STILL).locator('.cr-badge-stale').waitFor();
    await page.unroute('**/__anteroom/admin/api/rooms');
    await page.unroute('**/__anteroom/admin/api/status');
    await conn.waitFor({ state: 'detached' });
    await store.waitFor({ state: 'detached' });
    await page.context().close();
  });

  it('passes axe-core and looks right, dark and light', async () => {
    // Somebody waiting again, so the tile has something to show.
    for (let i = 0; i < 3; i++) await visit(ar.port, 'localhost');
    for (const scheme of ['dark', 'light'] as const) {
      const { page, errors } = await newPage({ ...DESKTOP, colorScheme: scheme });
      await signIn(page);
      await tile(page, STILL).waitFor();
      await page.waitForFunction(
        () => Number(document.querySelector('section[data-room="still"] svg')?.getAttribute('data-samples')) >= 4,
        undefined,
        { timeout: 10_000 },
      );
      expect(await page.getAttribute('html', 'lang')).toBe('en');
      expect(await axeViolations(page)).toEqual([]);
      await page.screenshot({ path: path.join(ARTIFACTS, `control-room-${scheme}.png`), fullPage: true });
      expect(errors).toEqual([]);
      await page.context().close();
    }
    const { page } = await newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
    await signIn(page);
    await tile(page, STILL).waitFor();
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-room-phone.png'), fullPage: true });
    await page.context().close();
  });
});

/** The zone the events test's browser runs in: what is typed is New York time. */
const ZONE = 'America/New_York';

/** `ms` as a `datetime-local` value in {@link ZONE}, to the second. */
function localInput(ms: number): string {
  const parts = Object.fromEntries(
    new Intl.DateTimeFormat('en-US', {
      timeZone: ZONE,
      hourCycle: 'h23',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
    })
      .formatToParts(new Date(ms))
      .map((p) => [p.type, p.value]),
  );
  return `${parts.year}-${parts.month}-${parts.day}T${parts.hour}:${parts.minute}:${parts.second}`;
}

interface EventView {
  id: string;
  name: string;
  state: string;
  queue_opens_at: string;
  admits_at: string;
  closes_at?: string | null;
  rate?: number;
}

async function events(name: string): Promise<{ events: EventView[]; current: string | null }> {
  const r = await api(`/rooms/${name}/events`);
  expect(r.status).toBe(200);
  return (await r.json()) as { events: EventView[]; current: string | null };
}

/** Scrolls to the top, so a full-page screenshot has the sticky header at the top. */
async function top(page: Page): Promise<void> {
  await page.evaluate(() => window.scrollTo(0, 0));
}

/** Waits until the tile's phase badge reads one of `labels`. */
async function phase(page: Page, name: string, labels: string[], timeout = 10_000): Promise<void> {
  await page.waitForFunction(
    ([room, want]) => want.includes(document.querySelector(`section[data-room="${room}"] [data-stat="phase"]`)?.textContent ?? ''),
    [name, labels] as const,
    { timeout },
  );
}

describe('a room\'s events in the control room', () => {
  it('adds an event, edits it (the phase follows), shows the API\'s field error, deletes it, and sets the schedule', async () => {
    const { page, errors } = await newPage({ ...DESKTOP, colorScheme: 'dark', timezoneId: ZONE });
    await signIn(page);
    const moving = tile(page, MOVING);
    await moving.waitFor();
    const panel = moving.getByTestId('events');
    await panel.locator('summary').click();
    await panel.getByText('No events: the room runs on its own schedule.').waitFor();

    // An event an hour ahead, with a rate override: current at once (the first not closed),
    // so the room waits for its line to open, at the event's rate.
    const hour = Date.now() + 3600_000;
    await panel.getByLabel('Name (for you; optional)').fill('Spring drop');
    await panel.getByLabel('Line opens').fill(localInput(hour));
    await panel.getByLabel('Doors open').fill(localInput(hour + 600_000));
    await panel.getByLabel('Closes (optional)').fill(localInput(hour + 7200_000));
    await panel.getByLabel('Admitted per second').fill('3');
    await panel.getByRole('button', { name: 'Add event' }).click();
    await panel.getByText(/^Added “Spring drop”/).waitFor();
    const created = await events(MOVING);
    expect(created.events).toHaveLength(1);
    const ev = created.events[0];
    expect(created.current).toBe(ev.id);
    // Typed in New York time, sent with its offset: the same instants, to the second.
    expect(Date.parse(ev.queue_opens_at)).toBe(Math.floor(hour / 1000) * 1000);
    expect(Date.parse(ev.admits_at)).toBe(Math.floor(hour / 1000) * 1000 + 600_000);
    expect(ev.rate).toBe(3);
    const item = panel.locator(`li[data-event-id="${ev.id}"]`);
    await item.waitFor();
    expect(await item.getAttribute('aria-current')).toBe('true');
    expect(await item.locator('time').first().textContent()).toMatch(/ UTC-0[45]:00$/);
    await phase(page, MOVING, ['Before the line opens']);
    await eventually(MOVING, (r) => r.rate === 3);

    // Edited with the doors before the line: the API names the field, the form marks it.
    await item.getByRole('button', { name: 'Edit “Spring drop”' }).click();
    expect(await panel.getByLabel('Name (for you; optional)').inputValue()).toBe('Spring drop');
    await panel.getByLabel('Doors open').fill(localInput(hour - 600_000));
    await panel.getByRole('button', { name: 'Save changes' }).click();
    const doorsError = panel.locator('[data-field-error="admits_at"]');
    await doorsError.waitFor();
    expect(await panel.getByLabel('Doors open').getAttribute('aria-invalid')).toBe('true');
    expect(await panel.getByLabel('Doors open').getAttribute('aria-describedby')).toBe(await doorsError.getAttribute('id'));
    expect(await page.evaluate(() => document.activeElement?.getAttribute('name'))).toBe('admits_at');
    expect(await axeViolations(page)).toEqual([]);
    await top(page);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-events-error.png'), fullPage: true });
    expect((await events(MOVING)).events[0].admits_at).toBe(ev.admits_at);

    // Now: the line opened a minute ago, the doors open in a few seconds, rate 4. The
    // room draws, then admits.
    const now = Date.now();
    await panel.getByLabel('Line opens').fill(localInput(now - 60_000));
    await panel.getByLabel('Doors open').fill(localInput(now + 12_000));
    await panel.getByLabel('Admitted per second').fill('4');
    await panel.getByRole('button', { name: 'Save changes' }).click();
    await panel.getByText(/^Saved “Spring drop”/).waitFor();
    await phase(page, MOVING, ['Draw']);
    await eventually(MOVING, (r) => r.rate === 4);
    expect(await item.getAttribute('aria-current')).toBe('true');
    expect(await item.getAttribute('data-state')).toBe('current');
    expect(await item.locator('[data-col="overrides"]').textContent()).toBe('rate 4/s');
    await moving.locator('[data-stat="event"]').getByText('now: Spring drop').waitFor();
    expect(await axeViolations(page)).toEqual([]);
    await top(page);
    await page.screenshot({ path: path.join(ARTIFACTS, 'control-events-dark.png'), fullPage: true });
    await phase(page, MOVING, ['Queueing', 'Idle'], 30_000);

    // The same panel, light and on a phone.
    for (const [file, options] of [
      ['control-events-light.png', { ...DESKTOP, colorScheme: 'light' }],
      ['control-events-phone.png', { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true, colorScheme: 'dark' }],
      ['control-events-phone-light.png', { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true, colorScheme: 'light' }],
    ] as const) {
      const other = await newPage({ ...options, timezoneId: ZONE });
      await signIn(other.page);
      const otherPanel = tile(other.page, MOVING).getByTestId('events');
      await otherPanel.locator('summary').click();
      await otherPanel.locator(`li[data-event-id="${ev.id}"][aria-current="true"]`).waitFor();
      expect(await axeViolations(other.page)).toEqual([]);
      await top(other.page);
      await other.page.screenshot({ path: path.join(ARTIFACTS, file), fullPage: true });
      expect(other.errors).toEqual([]);
      await other.page.context().close();
    }

    // Deleting asks first; the room goes back to its own schedule.
    await item.getByRole('button', { name: 'Delete… “Spring drop”' }).click();
    await item.getByText('Delete “Spring drop”? This cannot be undone.').waitFor();
    await item.getByRole('button', { name: 'Cancel' }).click();
    expect((await events(MOVING)).events).toHaveLength(1);
    await item.getByRole('button', { name: 'Delete… “Spring drop”' }).click();
    await item.getByRole('button', { name: 'Delete event' }).click();
    await panel.getByText('Deleted “Spring drop”.').waitFor();
    await panel.getByText('No events: the room runs on its own schedule.').waitFor();
    expect(await events(MOVING)).toEqual({ events: [], current: null });
    await phase(page, MOVING, ['Queueing', 'Idle']);
    await moving.locator('[data-stat="event"]').waitFor({ state: 'detached' });

    // The schedule is a setting of its own too, typed the same way in the settings editor.
    await moving.getByText('All settings', { exact: true }).click();
    const opens = moving.getByLabel('Schedule: line opens (empty: no time)');
    await opens.waitFor();
    expect(await opens.inputValue()).toBe('');
    const later = Date.now() + 3600_000;
    await opens.fill(localInput(later));
    await moving.getByRole('button', { name: 'Apply settings' }).click();
    await moving.getByText(/^Applied schedule: in force now\./).waitFor();
    const scheduled = (await (await api(`/rooms/${MOVING}/config`)).json()) as { schedule: { queue_opens_at?: string } };
    expect(Date.parse(scheduled.schedule.queue_opens_at ?? '')).toBe(Math.floor(later / 1000) * 1000);
    await phase(page, MOVING, ['Before the line opens']);
    await opens.fill('');
    await moving.getByRole('button', { name: 'Apply settings' }).click();
    await moving.getByText(/^Applied schedule: in force now\./).waitFor();
    await phase(page, MOVING, ['Queueing', 'Idle']);
    // The browser logs the refused PUT (422) itself.
    expect(errors.filter((e) => !e.includes('422'))).toEqual([]);
    await page.context().close();
  });
});
