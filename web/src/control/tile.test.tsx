// The room tile rendered with a fake API: the honest-ETA line appears when the server
// reports `eta`, and nothing when an older server does not.
import { render } from 'preact';
import { afterEach, describe, expect, it } from 'vitest';
import { Api, TOKEN_KEY, type RoomView } from './api';
import { App } from './App';

const room = (extra: Partial<RoomView>): RoomView => ({
  room: 'main',
  stats_available: true,
  waiting: 3,
  active: 1,
  max_active: 10,
  rate: 1,
  paused: false,
  observed_rate: 1,
  stats_age_secs: 0.2,
  ...extra,
});

const STATUS = {
  version: 'test',
  frontend_built_in: true,
  store: { kind: 'embedded', up: true, down_for_secs: null },
  fail_open: { enabled: false, after_secs: null, active: false },
  audit_log: { path: '/tmp/audit.log', ok: true, last_error: null },
  rooms: ['main'],
  open_streams: 0,
};

type Call = { url: string; method: string; body: unknown };

function mount(rooms: RoomView[], calls: Call[] = []): HTMLElement {
  const storage = new Map<string, string>([[TOKEN_KEY, 'tok']]);
  const fake = {
    getItem: (k: string) => storage.get(k) ?? null,
    setItem: (k: string, v: string) => void storage.set(k, v),
    removeItem: (k: string) => void storage.delete(k),
  };
  const makeApi = (t: string) =>
    new Api(t, async (url, init) => {
      calls.push({ url, method: init?.method ?? 'GET', body: init?.body ? JSON.parse(String(init.body)) : undefined });
      if (init?.method === 'PUT') {
        const body = JSON.parse(String(init.body));
        return new Response(JSON.stringify({ room: 'main', settings: { mode: body.mode }, audit: { written: true } }), {
          status: 200,
        });
      }
      return new Response(JSON.stringify(url.endsWith('/rooms') ? { rooms } : STATUS), { status: 200 });
    });
  const root = document.createElement('div');
  document.body.append(root);
  render(<App storage={fake} version="test" makeApi={makeApi} />, root);
  return root;
}

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !check(); i++) await new Promise((r) => setTimeout(r, 10));
  expect(check()).toBe(true);
}

afterEach(() => {
  for (const el of [...document.body.children]) {
    render(null, el);
    el.remove();
  }
});

describe('the room tile', () => {
  it('shows the honest-ETA figures when the server reports them', async () => {
    const root = mount([room({ eta: { admitted: 1203, within_range: 0.944, median_error_secs: 3 } })]);
    await until(() => root.querySelector('[data-stat="eta"]') !== null);
    expect(root.querySelector('[data-stat="eta"]')?.textContent).toBe(
      'ETA honesty: 94 % of 1,203 admitted in the last hour within the range shown; median error 3 s',
    );
    expect(root.querySelector('.cr-eta-low')).toBeNull();
  });

  it('marks a share below the aim', async () => {
    const root = mount([room({ eta: { admitted: 500, within_range: 0.7, median_error_secs: 40 } })]);
    await until(() => root.querySelector('[data-stat="eta"]') !== null);
    expect(root.querySelector('.cr-eta-low')?.textContent).toContain('(below the 90 % aim)');
  });

  it('shows nothing about ETAs for a server without the figures', async () => {
    const root = mount([room({})]);
    await until(() => root.querySelector('[data-stat="waiting"]')?.textContent === '3');
    expect(root.querySelector('[data-stat="eta"]')).toBeNull();
    expect(root.textContent).not.toContain('ETA');
  });
});

describe('the room tile\'s origin protections', () => {
  it('shows the in-flight requests and the breaker when set, emphasised near the cap', async () => {
    const root = mount([room({ waiting: 9_800, inflight: { now: 3, max: 8 }, max_waiting: 10_000 })]);
    await until(() => root.querySelector('[data-stat="inflight"]') !== null);
    expect(root.querySelector('[data-stat="inflight"]')?.textContent).toBe('Origin: 3 of 8 in flight (this replica)');
    expect(root.querySelector('[data-stat="inflight"]')?.classList.contains('cr-limit-near')).toBe(false);
    const breaker = root.querySelector('[data-stat="breaker"]');
    expect(breaker?.textContent).toBe('Line capped at 10,000 (breaker) · line 98 % full');
    expect(breaker?.classList.contains('cr-limit-near')).toBe(true);
    expect(root.querySelector('strong[data-stat="breaker-fill"]')?.textContent).toBe('line 98 % full');
  });

  it('shows the breaker without a fill far from the cap', async () => {
    const root = mount([room({ waiting: 3, inflight: null, max_waiting: 10_000 })]);
    await until(() => root.querySelector('[data-stat="breaker"]') !== null);
    expect(root.querySelector('[data-stat="breaker"]')?.textContent).toBe('Line capped at 10,000 (breaker)');
    expect(root.querySelector('[data-stat="inflight"]')).toBeNull();
  });

  it('shows neither when unset (or from an older server)', async () => {
    for (const extra of [{ inflight: null, max_waiting: 0 }, {}]) {
      const root = mount([room(extra)]);
      await until(() => root.querySelector('[data-stat="waiting"]')?.textContent === '3');
      expect(root.querySelector('.cr-limits')).toBeNull();
      expect(root.textContent).not.toContain('in flight');
      expect(root.textContent).not.toContain('breaker');
      render(null, root);
      root.remove();
    }
  });
});

describe('the Bans form', () => {
  it('says when a duration cannot be read, without asking the API, and sends null for permanent', async () => {
    const posts: string[] = [];
    const storage = new Map<string, string>([[TOKEN_KEY, 'tok']]);
    const fake = {
      getItem: (k: string) => storage.get(k) ?? null,
      setItem: (k: string, v: string) => void storage.set(k, v),
      removeItem: (k: string) => void storage.delete(k),
    };
    const makeApi = (t: string) =>
      new Api(t, async (url, init) => {
        if (init?.method === 'POST') {
          posts.push(String(init.body));
          const ban = { target: '203.0.113.7/32', source: 'admin', reason: '', since: new Date().toISOString(), until: null, remaining_secs: null, permanent: true, cursor: 1 };
          return new Response(JSON.stringify({ ban, audit: { written: true } }), { status: 201 });
        }
        if (url.includes('/bans/log')) return new Response('{"log":[],"next_cursor":null}');
        if (url.includes('/bans')) return new Response('{"bans":[],"next_cursor":null}');
        return new Response(JSON.stringify(url.endsWith('/rooms') ? { rooms: [] } : STATUS));
      });
    const root = document.createElement('div');
    document.body.append(root);
    render(<App storage={fake} version="test" makeApi={makeApi} />, root);
    await until(() => [...root.querySelectorAll('nav button')].some((b) => b.textContent === 'Bans'));
    ([...root.querySelectorAll('nav button')].find((b) => b.textContent === 'Bans') as HTMLButtonElement).click();
    await until(() => root.querySelector('#cr-ban-target') !== null);

    const type = (id: string, value: string) => {
      const input = root.querySelector(`#${id}`) as HTMLInputElement;
      input.value = value;
      input.dispatchEvent(new Event('input', { bubbles: true }));
    };
    // After a render, so the form's handler sees what was typed.
    const submit = async () => {
      await new Promise((r) => setTimeout(r, 20));
      (root.querySelector('form.cr-ban-form') as HTMLFormElement).requestSubmit();
    };
    type('cr-ban-target', '203.0.113.7');
    type('cr-ban-duration', 'soon');
    await submit();
    await until(() => root.querySelector('[data-field-error="duration_secs"]') !== null);
    expect(root.querySelector('#cr-ban-duration')?.getAttribute('aria-invalid')).toBe('true');
    expect(posts).toEqual([]);

    const permanent = root.querySelector('#cr-ban-permanent') as HTMLInputElement;
    permanent.click();
    await until(() => (root.querySelector('#cr-ban-duration') as HTMLInputElement).disabled);
    expect(root.querySelector('[data-field-error="duration_secs"]')).toBeNull();
    await submit();
    await until(() => posts.length === 1);
    expect(JSON.parse(posts[0])).toEqual({ target: '203.0.113.7', duration_secs: null, reason: '' });
    await until(() => root.querySelector('[data-testid="ban-result"]')?.textContent === 'Banned 203.0.113.7/32 permanently.');
  });

  it('shows the phase and switches the mode after a confirmation', async () => {
    const calls: Call[] = [];
    const root = mount([room({ mode: 'queue', phase: 'draw' })], calls);
    await until(() => root.querySelector('[data-stat="phase"]') !== null);
    expect(root.querySelector('[data-stat="phase"]')?.textContent).toBe('Draw');
    const select = root.querySelector('[data-testid="mode"] select') as HTMLSelectElement;
    expect(select.value).toBe('queue');
    select.value = 'sold_out';
    select.dispatchEvent(new Event('change'));
    await until(() => root.querySelector('[data-action="mode"]') !== null);
    expect(calls.some((c) => c.method === 'PUT')).toBe(false);
    (root.querySelector('[data-action="mode"]') as HTMLButtonElement).click();
    await until(() => calls.some((c) => c.method === 'PUT'));
    const put = calls.find((c) => c.method === 'PUT');
    expect(put?.url).toContain('/rooms/main/config');
    expect(put?.body).toEqual({ mode: 'sold_out' });
    await until(() => root.textContent?.includes('Mode: Sold out') ?? false);
  });

  it('shows no mode switch for a server without modes', async () => {
    const root = mount([room({})]);
    await until(() => root.querySelector('[data-stat="waiting"]')?.textContent === '3');
    expect(root.querySelector('[data-testid="mode"]')).toBeNull();
    expect(root.querySelector('[data-stat="phase"]')).toBeNull();
  });
});
