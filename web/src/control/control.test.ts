import { describe, expect, it, vi } from 'vitest';
import {
  Api,
  ApiError,
  buildPatch,
  clearToken,
  fieldMessage,
  loadToken,
  normalizeRef,
  parseDuration,
  parseProblem,
  saveToken,
  TOKEN_KEY,
} from './api';
import { actionLabel, banDeadline, banKey, describeLength, formatTimeLeft, parseTime, sourceLabel } from './bans';
import {
  formatAdaptive,
  formatAge,
  formatBreaker,
  formatClock,
  formatCount,
  formatDuration,
  formatEta,
  formatInflight,
  formatRate,
  formatWhen,
  plural,
} from './format';
import { addSample, describeHistory, niceCeiling, sparkline, WINDOW_MS, type Sample } from './sparkline';

describe('format', () => {
  it('groups counts and marks missing values', () => {
    expect(formatCount(0)).toBe('0');
    expect(formatCount(1234567)).toBe('1,234,567');
    expect(formatCount(12.6)).toBe('13');
    expect(formatCount(undefined)).toBe('–');
    expect(formatCount(null)).toBe('–');
    expect(formatCount(NaN)).toBe('–');
  });

  it('shows rates with three significant digits and no trailing zeros', () => {
    expect(formatRate(0)).toBe('0');
    expect(formatRate(0.01)).toBe('0.01');
    expect(formatRate(0.016666)).toBe('0.0167');
    expect(formatRate(1.5)).toBe('1.5');
    expect(formatRate(19.8333)).toBe('19.8');
    expect(formatRate(20)).toBe('20');
    expect(formatRate(250.4)).toBe('250');
    expect(formatRate(12000)).toBe('12,000');
    expect(formatRate(undefined)).toBe('–');
  });

  it('shows durations in their two coarsest units', () => {
    expect(formatDuration(0)).toBe('0 s');
    expect(formatDuration(42.9)).toBe('42 s');
    expect(formatDuration(65)).toBe('1 min 05 s');
    expect(formatDuration(3600 * 2 + 180)).toBe('2 h 03 min');
    expect(formatDuration(86_400 + 3600 * 4 + 5)).toBe('1 d 4 h');
    expect(formatDuration(null)).toBe('–');
    expect(formatDuration(-1)).toBe('–');
  });

  it('shows ages with a decimal while they are short', () => {
    expect(formatAge(0.42)).toBe('0.4 s');
    expect(formatAge(9.96)).toBe('10.0 s');
    expect(formatAge(12)).toBe('12 s');
    expect(formatAge(125)).toBe('2 min 05 s');
    expect(formatAge(undefined)).toBe('–');
  });

  it('formats clock times and plurals', () => {
    const t = new Date(2024, 0, 2, 3, 4, 5).getTime();
    expect(formatClock(t)).toBe('03:04:05');
    expect(plural(1, 'visitor', 'visitors')).toBe('1 visitor');
    expect(plural(0, 'visitor', 'visitors')).toBe('0 visitors');
    expect(plural(1500, 'visitor', 'visitors')).toBe('1,500 visitors');
  });
});

describe('the origin in-flight cap and the queue breaker on the room tile', () => {
  it('says how many requests are at the origin of how many this replica allows', () => {
    expect(formatInflight({ now: 3, max: 8 })).toEqual({ text: 'Origin: 3 of 8 in flight (this replica)', near: false });
    expect(formatInflight({ now: 0, max: 1200 })?.text).toBe('Origin: 0 of 1,200 in flight (this replica)');
    expect(formatInflight({ now: 7, max: 8 })?.near).toBe(false);
    expect(formatInflight({ now: 9, max: 10 })?.near).toBe(true);
    expect(formatInflight({ now: 8, max: 8 })).toEqual({ text: 'Origin: 8 of 8 in flight (this replica)', near: true });
  });

  it('shows nothing about the origin without a cap', () => {
    expect(formatInflight(null)).toBeNull();
    expect(formatInflight(undefined)).toBeNull();
    expect(formatInflight({ now: 0, max: 0 })).toBeNull();
  });

  it('says where the line is capped, and how full it is near the cap', () => {
    expect(formatBreaker(10_000, 12)).toEqual({ text: 'Line capped at 10,000 (breaker)', fill: null, near: false });
    expect(formatBreaker(10_000, 8_999)?.fill).toBeNull();
    expect(formatBreaker(10_000, 9_800)).toEqual({ text: 'Line capped at 10,000 (breaker)', fill: 'line 98 % full', near: true });
    // Rounded down: not full until it is.
    expect(formatBreaker(10_000, 9_999)?.fill).toBe('line 99 % full');
    expect(formatBreaker(10_000, 10_000)).toEqual({
      text: 'Line capped at 10,000 (breaker)',
      fill: 'line full: newcomers are turned away',
      near: true,
    });
    expect(formatBreaker(10, undefined)).toEqual({ text: 'Line capped at 10 (breaker)', fill: null, near: false });
  });

  it('shows nothing about a breaker that is off', () => {
    expect(formatBreaker(0, 5)).toBeNull();
    expect(formatBreaker(undefined, 5)).toBeNull();
  });
});

describe('honest ETA on the room tile', () => {
  it('says how many of the last hour were admitted within the range shown', () => {
    expect(formatEta({ admitted: 1203, within_range: 0.944, median_error_secs: 3 })).toEqual({
      text: 'ETA honesty: 94 % of 1,203 admitted in the last hour within the range shown; median error 3 s',
      belowAim: false,
    });
    expect(formatEta({ admitted: 50, within_range: 1, median_error_secs: 0 })?.text).toBe(
      'ETA honesty: 100 % of 50 admitted in the last hour within the range shown; median error 0 s',
    );
    // Long and fractional medians.
    expect(formatEta({ admitted: 40, within_range: 0.95, median_error_secs: 125.4 })?.text).toMatch(/median error 2 min 05 s$/);
    expect(formatEta({ admitted: 40, within_range: 0.95, median_error_secs: 2.64 })?.text).toMatch(/median error 2.6 s$/);
  });

  it('never rounds up to a better share than measured', () => {
    expect(formatEta({ admitted: 1000, within_range: 0.999, median_error_secs: 1 })?.text).toContain(' 99 % of 1,000');
    expect(formatEta({ admitted: 1000, within_range: 0.899, median_error_secs: 1 })?.text).toContain(' 89 % of');
    expect(formatEta({ admitted: 3, within_range: 1.2, median_error_secs: null })?.text).toBe(
      'ETA honesty: 100 % of 3 admitted in the last hour within the range shown',
    );
  });

  it('flags a share below the 90 % aim once there are enough admissions to judge', () => {
    expect(formatEta({ admitted: 200, within_range: 0.8, median_error_secs: 12 })).toEqual({
      text: 'ETA honesty: 80 % of 200 admitted in the last hour within the range shown; median error 12 s (below the 90 % aim)',
      belowAim: true,
    });
    expect(formatEta({ admitted: 19, within_range: 0.5, median_error_secs: 12 })?.belowAim).toBe(false);
    expect(formatEta({ admitted: 20, within_range: 0.9, median_error_secs: 12 })?.belowAim).toBe(false);
  });

  it('says so when nobody was admitted, and shows nothing for servers without the figures', () => {
    expect(formatEta({ admitted: 0, within_range: null, median_error_secs: null })?.text).toBe(
      'ETA honesty: nobody admitted in the last hour to compare with the range shown',
    );
    expect(formatEta(undefined)).toBeNull();
    expect(formatEta(null)).toBeNull();
    expect(formatEta({} as never)).toBeNull();
    expect(formatEta({ admitted: 'many' } as never)).toBeNull();
  });
});

describe('bans', () => {
  it('reads durations as operators type them', () => {
    expect(parseDuration('3600')).toBe(3600);
    expect(parseDuration('90s')).toBe(90);
    expect(parseDuration('30m')).toBe(1800);
    expect(parseDuration(' 1h ')).toBe(3600);
    expect(parseDuration('1H 30M')).toBe(5400);
    expect(parseDuration('1.5h')).toBe(5400);
    expect(parseDuration('2d')).toBe(172_800);
    expect(parseDuration('1w')).toBe(604_800);
    expect(parseDuration('10 min')).toBe(600);
    expect(parseDuration('2 hours')).toBe(7200);
    // 0 is a duration; the API says why it is refused.
    expect(parseDuration('0')).toBe(0);
    expect(parseDuration('0s')).toBe(0);
    for (const bad of ['', '  ', 'h', '1x', '1h-', '-1h', 'soon', '1e3', '1..5h', '9'.repeat(400)]) {
      expect(parseDuration(bad)).toBeNull();
    }
  });

  it('counts a ban down from what the server said was left, not from the browser clock', () => {
    const received = 5_000_000;
    const ban = { remaining_secs: 3600, permanent: false };
    const end = banDeadline(ban, received);
    expect(end).toBe(received + 3_600_000);
    expect(formatTimeLeft(end, received)).toBe('1 h 00 min');
    expect(formatTimeLeft(end, received + 1)).toBe('1 h 00 min');
    expect(formatTimeLeft(end, received + 1000)).toBe('59 min 59 s');
    expect(formatTimeLeft(end, received + 3_599_500)).toBe('1 s');
    expect(formatTimeLeft(end, received + 3_600_000)).toBe('ending');
    // A later reading (rounded up by the server) never moves the end later.
    expect(banDeadline({ remaining_secs: 3599, permanent: false }, received + 1500, end)).toBe(received + 3_600_000);
    expect(banDeadline({ remaining_secs: 3598, permanent: false }, received + 1500, end)).toBe(received + 3_599_500);
    expect(banDeadline({ remaining_secs: null, permanent: true }, received)).toBeNull();
    expect(formatTimeLeft(null, received)).toBe('permanent');
  });

  it('names sources, actions and lengths', () => {
    expect(sourceLabel('automatic')).toBe('automatic (strikes)');
    expect(sourceLabel('ban_path')).toBe('ban path');
    expect(sourceLabel('admin')).toBe('admin');
    expect(sourceLabel('future')).toBe('future');
    expect(actionLabel('expired')).toBe('expired');
    expect(actionLabel('other')).toBe('other');
    expect(describeLength(3600)).toBe('for 1 h 00 min');
    expect(describeLength(null)).toBe('permanently');
    expect(banKey({ target: '192.0.2.0/24', until: null })).toBe('192.0.2.0/24 permanent');
    expect(banKey({ target: '192.0.2.0/24', until: '2024-01-01T00:00:00Z' })).toBe('192.0.2.0/24 2024-01-01T00:00:00Z');
    expect(parseTime('2024-01-02T03:04:05Z')).toBe(Date.UTC(2024, 0, 2, 3, 4, 5));
    expect(parseTime(null)).toBeNaN();
  });

  it('shows today as a clock time and other days with the date', () => {
    const now = new Date(2024, 5, 10, 12, 0, 0).getTime();
    expect(formatWhen(new Date(2024, 5, 10, 3, 4, 5).getTime(), now)).toBe('03:04:05');
    expect(formatWhen(new Date(2024, 5, 9, 23, 59, 0).getTime(), now)).toBe('2024-06-09 23:59');
    expect(formatWhen(NaN, now)).toBe('–');
  });
});

describe('sparkline', () => {
  it('rounds the scale up to 1, 2 or 5 × 10ⁿ', () => {
    expect(niceCeiling(0)).toBe(1);
    expect(niceCeiling(1)).toBe(1);
    expect(niceCeiling(1.2)).toBe(2);
    expect(niceCeiling(3)).toBe(5);
    expect(niceCeiling(7)).toBe(10);
    expect(niceCeiling(10)).toBe(10);
    expect(niceCeiling(11)).toBe(20);
    expect(niceCeiling(480)).toBe(500);
    expect(niceCeiling(501)).toBe(1000);
    expect(niceCeiling(1_000_001)).toBe(2_000_000);
    expect(niceCeiling(NaN)).toBe(1);
  });

  it('keeps only the window and ignores samples from the past', () => {
    let s: Sample[] = [];
    for (let t = 0; t <= 400_000; t += 1000) s = addSample(s, { t, v: t / 1000 });
    expect(s[0].t).toBe(400_000 - WINDOW_MS);
    expect(s[s.length - 1].t).toBe(400_000);
    expect(s.length).toBe(WINDOW_MS / 1000 + 1);
    const before = s;
    const after = addSample(s, { t: 10, v: 99 });
    expect(after).toEqual(before);
    expect(after).not.toBe(before);
  });

  it('scales time left to right and depth bottom to top', () => {
    const now = 1_000_000;
    const samples: Sample[] = [
      { t: now - WINDOW_MS, v: 0 },
      { t: now - WINDOW_MS / 2, v: 40 },
      { t: now, v: 80 },
    ];
    // gapMs large so the three samples (150 s apart) form one run.
    const g = sparkline(samples, { width: 300, height: 50, now, gapMs: WINDOW_MS });
    expect(g.peak).toBe(80);
    expect(g.top).toBe(100);
    expect(g.line).toBe('M0 50 L150 30 L300 10');
    expect(g.area).toBe('M0 50 L150 30 L300 10 L300 50 L0 50 Z');
  });

  it('is flat on the floor when nobody waits, and empty with no samples', () => {
    const now = 50_000;
    const g = sparkline(
      [
        { t: now - 1000, v: 0 },
        { t: now, v: 0 },
      ],
      { width: 300, height: 48, now },
    );
    expect(g.top).toBe(1);
    expect(g.line).toBe('M299 48 L300 48');
    expect(sparkline([], { width: 300, height: 48, now })).toEqual({ line: '', area: '', top: 1, peak: 0 });
  });

  it('breaks the line where readings are missing rather than inventing them', () => {
    const now = 600_000;
    const samples: Sample[] = [
      { t: now - 20_000, v: 10 },
      { t: now - 19_000, v: 10 },
      // 15 s without a reading
      { t: now - 4_000, v: 5 },
      { t: now - 3_000, v: 5 },
    ];
    const g = sparkline(samples, { width: 300, height: 10, now });
    expect(g.line.match(/M/g)).toHaveLength(2);
    expect(g.area.match(/Z/g)).toHaveLength(2);
  });

  it('leaves out samples outside the window and clamps negatives to the floor', () => {
    const now = 1_000_000;
    const g = sparkline(
      [
        { t: now - WINDOW_MS - 1, v: 1000 },
        { t: now, v: -5 },
      ],
      { width: 300, height: 48, now },
    );
    expect(g.peak).toBe(0);
    expect(g.line).toBe('M300 48');
    expect(g.area).toBe('');
  });

  it('describes the history in words for screen readers', () => {
    const now = 100_000;
    expect(describeHistory([], now)).toBe('Queue depth: no readings yet.');
    expect(
      describeHistory(
        [
          { t: now - 30_000, v: 12 },
          { t: now - 10_000, v: 40 },
          { t: now, v: 3 },
        ],
        now,
      ),
    ).toBe('Queue depth over the last 30 s: from 12 to 3 waiting, peak 40.');
  });
});

describe('API errors', () => {
  it('reads problem+json with its field', () => {
    const e = parseProblem(
      400,
      JSON.stringify({
        type: 'about:blank',
        title: 'Invalid input',
        status: 400,
        detail: 'rate: must be a number (got "fast"); nothing was changed',
        field: 'rate',
      }),
    );
    expect(e).toBeInstanceOf(ApiError);
    expect(e.status).toBe(400);
    expect(e.title).toBe('Invalid input');
    expect(e.field).toBe('rate');
    expect(e.unauthorized).toBe(false);
    expect(fieldMessage(e)).toBe('Must be a number (got "fast"); nothing was changed');
    expect(e.message).toBe('Invalid input: rate: must be a number (got "fast"); nothing was changed');
  });

  it('recognises a refused token', () => {
    const e = parseProblem(401, '{"title":"Wrong admin token","detail":"The bearer token is not this anteroom\'s admin_token.","status":401}');
    expect(e.unauthorized).toBe(true);
    expect(e.field).toBeNull();
    expect(e.title).toBe('Wrong admin token');
  });

  it('falls back to the status for bodies that are not problem+json', () => {
    const e = parseProblem(502, '<html><body><h1>502 Bad Gateway</h1>\n<p>nginx</p></body></html>');
    expect(e.title).toBe('Bad gateway');
    expect(e.detail).toBe('502 Bad Gateway nginx');
    expect(e.field).toBeNull();
    expect(parseProblem(418, '').title).toBe('HTTP 418');
    expect(parseProblem(418, '').detail).toBe('The server answered 418.');
    expect(parseProblem(500, '[1,2]').title).toBe('Server error');
    expect(parseProblem(500, 'x'.repeat(500)).detail).toHaveLength(200);
  });

  it('keeps a field message that does not repeat the field', () => {
    expect(fieldMessage(new ApiError(400, 'Invalid input', 'must be at least 1', 'max_active'))).toBe('Must be at least 1');
    expect(fieldMessage(new ApiError(503, 'Queue store unavailable', ''))).toBe('Queue store unavailable');
  });
});

describe('settings patch', () => {
  const current = { rate: 5, max_active: 100 };

  it('sends only what changed', () => {
    expect(buildPatch({ rate: '5', max_active: '100' }, current)).toEqual({});
    expect(buildPatch({ rate: '20', max_active: '100' }, current)).toEqual({ rate: 20 });
    expect(buildPatch({ rate: ' 0.5 ', max_active: '250' }, current)).toEqual({ rate: 0.5, max_active: 250 });
    expect(buildPatch({ rate: '', max_active: '' }, current)).toEqual({});
    expect(buildPatch({ rate: '1e2', max_active: '100' }, current)).toEqual({ rate: 100 });
  });

  it('sends what is not a number as typed, for the API to name the field', () => {
    expect(buildPatch({ rate: 'fast', max_active: '100' }, current)).toEqual({ rate: 'fast' });
    expect(buildPatch({ rate: '5', max_active: '0x10' }, current)).toEqual({ max_active: '0x10' });
    expect(buildPatch({ rate: 'Infinity', max_active: '100' }, current)).toEqual({ rate: 'Infinity' });
    expect(buildPatch({ rate: '-1', max_active: '100' }, current)).toEqual({ rate: -1 });
  });
});

describe('Api', () => {
  const json = (status: number, body: unknown, type = 'application/json') =>
    new Response(JSON.stringify(body), { status, headers: { 'content-type': type } });

  it('sends the bearer token and JSON bodies to the API paths', async () => {
    const calls: { url: string; init: RequestInit }[] = [];
    const api = new Api('tok-123', async (url, init) => {
      calls.push({ url, init: init ?? {} });
      if (url.endsWith('/rooms')) return json(200, { rooms: [{ room: 'main', stats_available: false }] });
      return json(200, { room: 'a b', settings: { rate: 2 }, audit: { written: true } });
    });
    expect(await api.rooms()).toEqual([{ room: 'main', stats_available: false }]);
    await api.configure('a b', { rate: 2 });
    await api.pause('main');
    await api.resume('main');
    await api.flush('main');
    expect(calls.map((c) => `${c.init.method} ${c.url}`)).toEqual([
      'GET /__anteroom/admin/api/rooms',
      'PUT /__anteroom/admin/api/rooms/a%20b/config',
      'POST /__anteroom/admin/api/rooms/main/pause',
      'POST /__anteroom/admin/api/rooms/main/resume',
      'POST /__anteroom/admin/api/rooms/main/flush',
    ]);
    for (const c of calls) {
      expect((c.init.headers as Record<string, string>).authorization).toBe('Bearer tok-123');
      expect(c.init.credentials).toBe('omit');
    }
    expect(calls[1].init.body).toBe('{"rate":2}');
    expect((calls[1].init.headers as Record<string, string>)['content-type']).toBe('application/json');
    expect(calls[2].init.body).toBeUndefined();
  });

  it('reads the head of the line, searches by ref and moves a visitor to the front', async () => {
    const calls: { url: string; init: RequestInit }[] = [];
    const entry = { ref: '7K2M9QXD', position: 3, joined_at_ms: 1_700_000_000_000, last_seen_ms: 1_700_000_001_000 };
    const api = new Api('tok-q', async (url, init) => {
      calls.push({ url, init: init ?? {} });
      if (url.endsWith('/front')) {
        return json(200, { room: 'a b', ref: '7K2M9QXD', position: 1, waiting: 9, audit: { written: true } });
      }
      return json(200, { room: 'a b', limit: 50, waiting: 9, entries: [entry] });
    });
    expect((await api.queue('a b')).entries).toEqual([entry]);
    await api.queue('a b', { limit: 1000 });
    await api.queue('a b', { ref: '7k2m-9qxd' });
    const moved = await api.moveToFront('a b', '7K2M9QXD');
    expect(moved).toMatchObject({ position: 1, waiting: 9, audit: { written: true } });
    expect(calls.map((c) => `${c.init.method} ${c.url}`)).toEqual([
      'GET /__anteroom/admin/api/rooms/a%20b/queue',
      'GET /__anteroom/admin/api/rooms/a%20b/queue?limit=1000',
      'GET /__anteroom/admin/api/rooms/a%20b/queue?ref=7k2m-9qxd',
      'POST /__anteroom/admin/api/rooms/a%20b/visitors/7K2M9QXD/front',
    ]);
    for (const c of calls) {
      expect((c.init.headers as Record<string, string>).authorization).toBe('Bearer tok-q');
      expect(c.init.body).toBeUndefined();
    }
  });

  it('names the field of a refused queue query and an unknown ref', async () => {
    const api = new Api('x', async (url) =>
      url.endsWith('/front')
        ? json(404, { title: 'Unknown visitor', detail: 'Nobody waiting has ZZZZZZZZ.', field: 'ref' }, 'application/problem+json')
        : json(422, { title: 'Invalid input', detail: 'limit: must be a whole number from 1 to 1000', field: 'limit' }, 'application/problem+json'),
    );
    await expect(api.queue('main', { limit: 0 })).rejects.toMatchObject({ status: 422, field: 'limit' });
    await expect(api.moveToFront('main', 'ZZZZZZZZ')).rejects.toMatchObject({ status: 404, field: 'ref', title: 'Unknown visitor' });
  });

  it('lists bans and the ban log page by page, bans, and lifts a ban by its URL-encoded target', async () => {
    const calls: { url: string; init: RequestInit }[] = [];
    const ban = {
      target: '192.0.2.0/24',
      source: 'admin',
      reason: 'scraper',
      since: '2024-01-02T03:04:05Z',
      until: '2024-01-02T04:04:05Z',
      remaining_secs: 3600,
      permanent: false,
      cursor: 7,
    };
    const api = new Api('tok-b', async (url, init) => {
      calls.push({ url, init: init ?? {} });
      if (url.includes('/bans/log')) return json(200, { log: [], next_cursor: null });
      if (init?.method === 'POST') return json(201, { ban, audit: { written: true } });
      if (init?.method === 'DELETE') return json(200, { unbanned: ban, audit: { written: true } });
      return json(200, { bans: [ban], next_cursor: 7 });
    });
    expect(await api.bans()).toEqual({ bans: [ban], next_cursor: 7 });
    await api.bans({ limit: 50, cursor: 7 });
    await api.bans({ limit: 50, cursor: null });
    expect(await api.banLog({ limit: 20 })).toEqual({ log: [], next_cursor: null });
    await api.banLog({ cursor: 3 });
    expect((await api.ban({ target: '192.0.2.0/24', duration_secs: 3600, reason: 'scraper' })).ban).toEqual(ban);
    await api.ban({ target: '2001:db8::/48', duration_secs: null, reason: '' });
    expect((await api.unban('192.0.2.0/24')).unbanned.target).toBe('192.0.2.0/24');
    await api.unban(' 2001:db8::/48 ');
    expect(calls.map((c) => `${c.init.method} ${c.url}`)).toEqual([
      'GET /__anteroom/admin/api/bans',
      'GET /__anteroom/admin/api/bans?limit=50&cursor=7',
      'GET /__anteroom/admin/api/bans?limit=50',
      'GET /__anteroom/admin/api/bans/log?limit=20',
      'GET /__anteroom/admin/api/bans/log?cursor=3',
      'POST /__anteroom/admin/api/bans',
      'POST /__anteroom/admin/api/bans',
      'DELETE /__anteroom/admin/api/bans/192.0.2.0%2F24',
      'DELETE /__anteroom/admin/api/bans/2001%3Adb8%3A%3A%2F48',
    ]);
    expect(calls[5].init.body).toBe('{"target":"192.0.2.0/24","duration_secs":3600,"reason":"scraper"}');
    expect(calls[6].init.body).toBe('{"target":"2001:db8::/48","duration_secs":null,"reason":""}');
    for (const c of calls) expect((c.init.headers as Record<string, string>).authorization).toBe('Bearer tok-b');
  });

  it('names the field of a refused ban and says when there is no ban to lift', async () => {
    const api = new Api('x', async (_url, init) =>
      init?.method === 'DELETE'
        ? json(404, { title: 'No such ban', status: 404, detail: 'no active ban on `198.51.100.0/24`', field: 'target' }, 'application/problem+json')
        : json(
            422,
            {
              title: 'Invalid ban',
              status: 422,
              detail: 'target: target `10.0.0.0/4` is broader than /8, the broadest range that may be banned; nothing was changed',
              field: 'target',
            },
            'application/problem+json',
          ),
    );
    const refused = await api.ban({ target: '10.0.0.0/4', duration_secs: 60, reason: '' }).catch((e: unknown) => e);
    expect(refused).toMatchObject({ status: 422, field: 'target', title: 'Invalid ban' });
    expect(fieldMessage(refused as ApiError)).toBe(
      'Target `10.0.0.0/4` is broader than /8, the broadest range that may be banned; nothing was changed',
    );
    await expect(api.unban('198.51.100.0/24')).rejects.toMatchObject({ status: 404, title: 'No such ban' });
  });

  it('reads references as people type them', () => {
    expect(normalizeRef('7k2m-9qxd')).toBe('7K2M9QXD');
    expect(normalizeRef(' 1O0I LABZ ')).toBe('10011ABZ');
    expect(normalizeRef('1234567')).toBeNull();
    expect(normalizeRef('123456789')).toBeNull();
    expect(normalizeRef('1234567U')).toBeNull();
    expect(normalizeRef('')).toBeNull();
  });

  it('turns error answers and network failures into ApiErrors', async () => {
    const refused = new Api('x', async () => json(401, { title: 'Wrong admin token', status: 401 }, 'application/problem+json'));
    await expect(refused.status()).rejects.toMatchObject({ status: 401, unauthorized: true });
    const down = new Api('x', async () => {
      throw new TypeError('Failed to fetch');
    });
    await expect(down.rooms()).rejects.toMatchObject({ status: 0, title: 'Cannot reach anteroom', detail: 'Failed to fetch' });
    const garbled = new Api('x', async () => new Response('not json', { status: 200 }));
    await expect(garbled.status()).rejects.toMatchObject({ title: 'Unreadable answer' });
  });
});

describe('token storage', () => {
  it('keeps the token under one sessionStorage key and forgets it on sign-out', () => {
    sessionStorage.clear();
    localStorage.clear();
    expect(loadToken(sessionStorage)).toBeNull();
    saveToken(sessionStorage, 'secret-token');
    expect(sessionStorage.getItem(TOKEN_KEY)).toBe('secret-token');
    expect(loadToken(sessionStorage)).toBe('secret-token');
    expect(localStorage.length).toBe(0);
    clearToken(sessionStorage);
    expect(loadToken(sessionStorage)).toBeNull();
  });

  it('survives storage that throws', () => {
    const broken = {
      getItem: vi.fn(() => {
        throw new Error('denied');
      }),
      setItem: vi.fn(() => {
        throw new Error('denied');
      }),
      removeItem: vi.fn(() => {
        throw new Error('denied');
      }),
    };
    expect(loadToken(broken)).toBeNull();
    expect(() => saveToken(broken, 't')).not.toThrow();
    expect(() => clearToken(broken)).not.toThrow();
  });
});

describe('closed-loop admission on the tile', () => {
  const adaptive = {
    origin_p95_ms: 1_200,
    origin_error_ratio: 0.12,
    target_latency_ms: 800,
    max_error_ratio: 0.05,
  };
  it('says why the effective rate is below the configured one', () => {
    expect(formatAdaptive({ rate: 50, effective_rate: 20, rate_reason: 'latency', adaptive })).toBe(
      'adaptive: 20/s — origin p95 1.2 s > 800 ms',
    );
    expect(formatAdaptive({ rate: 50, effective_rate: 25, rate_reason: 'errors', adaptive })).toBe(
      'adaptive: 25/s — origin 5xx 12 % > 5 %',
    );
    expect(formatAdaptive({ rate: 50, effective_rate: 40, rate_reason: 'recovering', adaptive })).toBe(
      'adaptive: 40/s — recovering',
    );
  });
  it('says nothing at the configured rate or without adaptive', () => {
    expect(formatAdaptive({ rate: 50, effective_rate: 50, rate_reason: 'configured', adaptive })).toBeNull();
    expect(formatAdaptive({ rate: 50, effective_rate: 50, adaptive: null })).toBeNull();
    expect(formatAdaptive({ rate: 50 })).toBeNull();
  });
});
