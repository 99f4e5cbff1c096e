import { describe, expect, it, vi } from 'vitest';
import {
  Api,
  ApiError,
  buildPatch,
  clearToken,
  fieldMessage,
  loadToken,
  normalizeRef,
  parseProblem,
  saveToken,
  TOKEN_KEY,
} from './api';
import { formatAge, formatClock, formatCount, formatDuration, formatRate, plural } from './format';
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
