// The events panel: local times typed into the form become RFC 3339 with the offset of the
// operator's time zone, a field the API names in a 422 is marked on its own input, and the
// list marks the current event. And the settings editor's schedule, typed the same way.
import { render } from 'preact';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Api } from './api';
import { EventsPanel } from './Events';
import { SettingsEditor } from './Settings';
import {
  EMPTY_FORM,
  eventToForm,
  formatInstant,
  formToBody,
  localToRfc3339,
  rfc3339ToLocal,
  type EventList,
} from './events';

const savedTz = process.env.TZ;
const inZone = (tz: string) => {
  process.env.TZ = tz;
};
afterEach(() => {
  if (savedTz === undefined) delete process.env.TZ;
  else process.env.TZ = savedTz;
  for (const el of [...document.body.children]) {
    render(null, el);
    el.remove();
  }
});

describe('local times as RFC 3339', () => {
  it('carries the offset the zone has on that date', () => {
    inZone('Europe/Paris');
    expect(localToRfc3339('2026-12-04T21:30')).toBe('2026-12-04T21:30:00+01:00');
    expect(localToRfc3339('2026-07-04T21:30:05')).toBe('2026-07-04T21:30:05+02:00');
    inZone('America/New_York');
    expect(localToRfc3339('2026-12-04T09:00:00')).toBe('2026-12-04T09:00:00-05:00');
    expect(localToRfc3339('2026-07-04T09:00:00.250')).toBe('2026-07-04T09:00:00-04:00');
    inZone('Asia/Kolkata');
    expect(localToRfc3339('2026-12-04T00:00')).toBe('2026-12-04T00:00:00+05:30');
    inZone('UTC');
    expect(localToRfc3339('2026-12-04T00:00')).toBe('2026-12-04T00:00:00+00:00');
  });

  it('names the same instant the operator typed', () => {
    inZone('Australia/Adelaide');
    const sent = localToRfc3339('2026-12-04T21:30:05');
    expect(sent).toBe('2026-12-04T21:30:05+10:30');
    expect(new Date(sent!).toISOString()).toBe('2026-12-04T11:00:05.000Z');
  });

  it('moves a time skipped by the clock change forward, as the browser does', () => {
    inZone('Europe/Paris');
    // 2026-03-29 02:30 does not exist in Paris: the clocks go from 02:00 to 03:00.
    expect(localToRfc3339('2026-03-29T02:30')).toBe('2026-03-29T03:30:00+02:00');
  });

  it('refuses what is not a date and a time', () => {
    for (const bad of ['', '2026-12-04', '2026-02-31T10:00', '2026-13-01T10:00', '2026-12-04T24:00', 'tomorrow']) {
      expect(localToRfc3339(bad)).toBeNull();
    }
  });

  it('reads the API’s instants back into the operator’s time, to the second', () => {
    inZone('Europe/Paris');
    expect(rfc3339ToLocal('2026-12-04T20:30:05Z')).toBe('2026-12-04T21:30:05');
    expect(rfc3339ToLocal('2026-12-04T15:30:05-05:00')).toBe('2026-12-04T21:30:05');
    expect(formatInstant('2026-12-04T20:30:05Z')).toBe('2026-12-04 21:30:05 UTC+01:00');
    expect(formatInstant('2026-07-04T20:30:05Z')).toBe('2026-07-04 22:30:05 UTC+02:00');
    expect(rfc3339ToLocal(null)).toBe('');
  });

  it('builds the body: times with the offset, blank overrides left out, numbers as numbers', () => {
    inZone('America/New_York');
    const built = formToBody({
      ...EMPTY_FORM,
      name: ' Spring drop ',
      queue_opens_at: '2026-12-04T09:00',
      admits_at: '2026-12-04T09:10:30',
      rate: '2.5',
      max_active: 'lots',
      lottery: 'false',
    });
    expect(built).toEqual({
      body: {
        name: 'Spring drop',
        queue_opens_at: '2026-12-04T09:00:00-05:00',
        admits_at: '2026-12-04T09:10:30-05:00',
        closes_at: null,
        rate: 2.5,
        // Sent as typed, so the API names the field.
        max_active: 'lots',
        lottery: false,
      },
    });
    // And back into the form for editing.
    if (!('body' in built)) throw new Error('not built');
    expect(eventToForm(built.body)).toEqual({
      ...EMPTY_FORM,
      name: 'Spring drop',
      queue_opens_at: '2026-12-04T09:00:00',
      admits_at: '2026-12-04T09:10:30',
      rate: '2.5',
      max_active: 'lots',
      lottery: 'false',
    });
  });

  it('says which required time is missing before asking the API', () => {
    expect(formToBody({ ...EMPTY_FORM, queue_opens_at: '2026-12-04T09:00', closes_at: 'soon' })).toEqual({
      errors: { admits_at: 'Enter a date and a time.', closes_at: 'Not a date and a time.' },
    });
  });
});

type Call = { url: string; method: string; body: unknown };

const LIST: EventList = {
  current: 'ev-2',
  events: [
    {
      id: 'ev-1',
      name: 'Preview',
      state: 'over',
      queue_opens_at: '2026-12-04T08:00:00Z',
      admits_at: '2026-12-04T08:05:00Z',
      closes_at: '2026-12-04T09:00:00Z',
    },
    {
      id: 'ev-2',
      name: 'Spring drop',
      state: 'current',
      queue_opens_at: '2026-12-04T20:00:00Z',
      admits_at: '2026-12-04T20:30:00Z',
      closes_at: '2026-12-04T22:00:00Z',
      rate: 5,
      max_active: 1200,
      lottery: true,
    },
    {
      id: 'ev-3',
      name: '',
      state: 'upcoming',
      queue_opens_at: '2026-12-05T20:00:00Z',
      admits_at: '2026-12-05T20:30:00Z',
      closes_at: null,
    },
  ],
};

/** The panel, open, over a fake API: `answer` decides the writes' answers. */
function mount(calls: Call[], answer: (call: Call) => Response, list: EventList = LIST): HTMLElement {
  const api = new Api('tok', async (url, init) => {
    const call = { url, method: init?.method ?? 'GET', body: init?.body ? JSON.parse(String(init.body)) : undefined };
    calls.push(call);
    if (call.method === 'GET') return new Response(JSON.stringify(list), { status: 200 });
    return answer(call);
  });
  const root = document.createElement('div');
  document.body.append(root);
  render(
    <EventsPanel id="cr-r0-main" room="main" api={api} onUnauthorized={() => {}} refresh={() => {}} open />,
    root,
  );
  return root;
}

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !check(); i++) await new Promise((r) => setTimeout(r, 10));
  expect(check()).toBe(true);
}

function type(root: HTMLElement, field: string, value: string): void {
  const input = root.querySelector(`#cr-r0-main-ev-${field}`) as HTMLInputElement | HTMLSelectElement;
  input.value = value;
  input.dispatchEvent(new Event(input instanceof HTMLSelectElement ? 'change' : 'input', { bubbles: true }));
}

/** After a render, so the form's handler sees what was typed. */
async function submit(root: HTMLElement): Promise<void> {
  await new Promise((r) => setTimeout(r, 20));
  (root.querySelector('form.cr-event-form') as HTMLFormElement).requestSubmit();
}

describe('the events panel', () => {
  beforeEach(() => inZone('Europe/Paris'));

  it('marks the current event, and shows every time in local time with the offset', async () => {
    const root = mount([], () => new Response('', { status: 500 }));
    await until(() => root.querySelectorAll('li[data-event-id]').length === 3);
    const marked = [...root.querySelectorAll('li[aria-current="true"]')];
    expect(marked.map((li) => li.getAttribute('data-event-id'))).toEqual(['ev-2']);
    expect(marked[0].classList.contains('cr-event-current')).toBe(true);
    expect(root.querySelectorAll('.cr-event-current')).toHaveLength(1);
    const states = [...root.querySelectorAll('li[data-event-id] [data-col="state"]')].map((s) => s.textContent);
    expect(states).toEqual(['Over', 'Current', 'Upcoming']);
    const current = marked[0];
    expect(current.querySelector('h4')?.textContent).toBe('Spring drop');
    expect([...current.querySelectorAll('time')].map((t) => t.textContent)).toEqual([
      '2026-12-04 21:00:00 UTC+01:00',
      '2026-12-04 21:30:00 UTC+01:00',
      '2026-12-04 23:00:00 UTC+01:00',
    ]);
    expect(current.querySelector('[data-col="overrides"]')?.textContent).toBe(
      'rate 5/s · max on the site 1,200 · lottery on',
    );
    const last = root.querySelector('li[data-event-id="ev-3"]');
    expect(last?.querySelector('h4')?.textContent).toBe('Unnamed event');
    expect(last?.textContent).toContain('stays open');
    expect(last?.querySelector('[data-col="overrides"]')?.textContent).toBe('none: the room’s own settings');
  });

  it('sends the local times as RFC 3339 with the offset', async () => {
    const calls: Call[] = [];
    const root = mount(calls, (c) =>
      new Response(JSON.stringify({ ...(c.body as object), id: 'ev-9', state: 'current' }), { status: 201 }),
    );
    await until(() => root.querySelector('li[data-event-id]') !== null);
    type(root, 'name', 'Launch');
    type(root, 'queue_opens_at', '2026-12-24T18:00');
    type(root, 'admits_at', '2026-12-24T18:15:30');
    type(root, 'rate', '12');
    await submit(root);
    await until(() => calls.some((c) => c.method === 'POST'));
    const post = calls.find((c) => c.method === 'POST')!;
    expect(post.url).toBe('/__anteroom/admin/api/rooms/main/events');
    expect(post.body).toEqual({
      name: 'Launch',
      queue_opens_at: '2026-12-24T18:00:00+01:00',
      admits_at: '2026-12-24T18:15:30+01:00',
      closes_at: null,
      rate: 12,
    });
    await until(() => root.textContent?.includes('Added “Launch” (Current).') ?? false);
  });

  it('puts a field error from the API next to its input, and on no other', async () => {
    const calls: Call[] = [];
    const root = mount(calls, () =>
      new Response(
        JSON.stringify({
          type: 'about:blank',
          title: 'Invalid input',
          status: 422,
          detail: 'admits_at: must be at or after queue_opens_at; nothing was changed',
          field: 'admits_at',
        }),
        { status: 422, headers: { 'content-type': 'application/problem+json' } },
      ),
    );
    await until(() => root.querySelector('li[data-event-id]') !== null);
    type(root, 'queue_opens_at', '2026-12-24T18:00');
    type(root, 'admits_at', '2026-12-24T17:00');
    await submit(root);
    await until(() => root.querySelector('[data-field-error]') !== null);
    const errors = [...root.querySelectorAll('[data-field-error]')];
    expect(errors.map((e) => e.getAttribute('data-field-error'))).toEqual(['admits_at']);
    expect(errors[0].textContent).toBe('Must be at or after queue_opens_at; nothing was changed');
    const input = root.querySelector('#cr-r0-main-ev-admits_at') as HTMLInputElement;
    expect(input.getAttribute('aria-invalid')).toBe('true');
    expect(input.getAttribute('aria-describedby')).toBe(errors[0].id);
    expect(document.activeElement).toBe(input);
    expect(root.querySelectorAll('[aria-invalid="true"]')).toHaveLength(1);
    // What was typed stays, to be corrected.
    expect(input.value).toBe('2026-12-24T17:00');
  });

  it('edits an event with a PUT of the whole event, and deletes only after a confirmation', async () => {
    const calls: Call[] = [];
    const root = mount(calls, (c) =>
      c.method === 'DELETE'
        ? new Response(null, { status: 204 })
        : new Response(JSON.stringify({ ...(c.body as object), id: 'ev-2', state: 'current' }), { status: 200 }),
    );
    await until(() => root.querySelector('li[data-event-id="ev-2"]') !== null);
    const buttons = (id: string) => [...root.querySelectorAll(`li[data-event-id="${id}"] button`)] as HTMLButtonElement[];
    buttons('ev-2').find((b) => b.textContent?.startsWith('Edit'))!.click();
    await until(() => (root.querySelector('#cr-r0-main-ev-name') as HTMLInputElement).value === 'Spring drop');
    // The input shows it in the operator's time (seconds of :00 dropped, as browsers do).
    expect((root.querySelector('#cr-r0-main-ev-admits_at') as HTMLInputElement).value).toBe('2026-12-04T21:30');
    expect((root.querySelector('#cr-r0-main-ev-lottery') as HTMLSelectElement).value).toBe('true');
    type(root, 'rate', '8');
    await submit(root);
    await until(() => calls.some((c) => c.method === 'PUT'));
    const put = calls.find((c) => c.method === 'PUT')!;
    expect(put.url).toBe('/__anteroom/admin/api/rooms/main/events/ev-2');
    expect(put.body).toEqual({
      name: 'Spring drop',
      queue_opens_at: '2026-12-04T21:00:00+01:00',
      admits_at: '2026-12-04T21:30:00+01:00',
      closes_at: '2026-12-04T23:00:00+01:00',
      rate: 8,
      max_active: 1200,
      lottery: true,
    });
    await until(() => root.textContent?.includes('Saved “Spring drop”') ?? false);

    buttons('ev-1').find((b) => b.textContent?.startsWith('Delete'))!.click();
    await until(() => root.querySelector('[data-action="confirm-delete-event"]') !== null);
    // The safe choice has the focus; cancelling deletes nothing and gives it back.
    await until(() => document.activeElement?.textContent === 'Cancel');
    (document.activeElement as HTMLButtonElement).click();
    await until(() => document.activeElement?.id === 'cr-r0-main-ev-delete-ev-1');
    expect(calls.some((c) => c.method === 'DELETE')).toBe(false);
    (document.activeElement as HTMLButtonElement).click();
    await until(() => root.querySelector('[data-action="confirm-delete-event"]') !== null);
    (root.querySelector('[data-action="confirm-delete-event"]') as HTMLButtonElement).click();
    await until(() => calls.some((c) => c.method === 'DELETE'));
    expect(calls.find((c) => c.method === 'DELETE')?.url).toBe('/__anteroom/admin/api/rooms/main/events/ev-1');
    await until(() => root.textContent?.includes('Deleted “Preview”.') ?? false);
    await until(() => document.activeElement?.id === 'cr-r0-main-ev-summary');
  });
});

describe('the settings editor’s schedule', () => {
  beforeEach(() => inZone('Europe/Paris'));

  async function editor(answer: (call: Call) => Response, calls: Call[]): Promise<HTMLElement> {
    const settings = {
      title: 'Drop',
      changed: [],
      challenge: { mode: 'off' },
      schedule: { queue_opens_at: '2026-12-04T20:00:00Z', admits_at: '2026-12-04T20:30:00Z', closes_at: null },
      join_limit_per_ip: 120,
      join_limit_window: '1m',
    };
    const api = new Api('tok', async (url, init) => {
      const call = { url, method: init?.method ?? 'GET', body: init?.body ? JSON.parse(String(init.body)) : undefined };
      calls.push(call);
      return call.method === 'GET' ? new Response(JSON.stringify(settings)) : answer({ ...call, body: { settings, put: call.body } });
    });
    const root = document.createElement('div');
    document.body.append(root);
    render(<SettingsEditor id="cr-r0-main" room="main" api={api} onUnauthorized={() => {}} refresh={() => {}} />, root);
    const details = root.querySelector('details') as HTMLDetailsElement;
    details.open = true;
    details.dispatchEvent(new Event('toggle'));
    await until(() => root.querySelector('#cr-r0-main-set-schedule-admits_at') !== null);
    return root;
  }

  it('shows the schedule in local time and sends it whole, with the offset, when a time is edited', async () => {
    const calls: Call[] = [];
    const root = await editor(
      (c) =>
        new Response(
          JSON.stringify({ room: 'main', settings: { ...(c.body as { settings: object }).settings, changed: ['schedule'] }, audit: { written: true } }),
        ),
      calls,
    );
    const input = (name: string) => root.querySelector(`#cr-r0-main-set-schedule-${name}`) as HTMLInputElement;
    expect(input('queue_opens_at').value).toBe('2026-12-04T21:00');
    expect(input('closes_at').value).toBe('');
    input('admits_at').value = '2026-12-04T21:45:10';
    input('admits_at').dispatchEvent(new Event('input', { bubbles: true }));
    const limit = root.querySelector('#cr-r0-main-set-join_limit_per_ip') as HTMLInputElement;
    limit.value = '30';
    limit.dispatchEvent(new Event('input', { bubbles: true }));
    await new Promise((r) => setTimeout(r, 20));
    (root.querySelector('form') as HTMLFormElement).requestSubmit();
    await until(() => calls.some((c) => c.method === 'PUT'));
    expect(calls.find((c) => c.method === 'PUT')?.body).toEqual({
      join_limit_per_ip: 30,
      schedule: { queue_opens_at: '2026-12-04T21:00:00+01:00', admits_at: '2026-12-04T21:45:10+01:00', closes_at: null },
    });
    await until(() => root.textContent?.includes('Applied join_limit_per_ip, schedule: in force now.') ?? false);
  });

  it('puts the API’s error about one of the schedule’s times under that time', async () => {
    const calls: Call[] = [];
    const root = await editor(
      () =>
        new Response(
          JSON.stringify({ title: 'Invalid input', status: 422, detail: 'schedule.admits_at: must not be before queue_opens_at', field: 'schedule.admits_at' }),
          { status: 422 },
        ),
      calls,
    );
    const admits = root.querySelector('#cr-r0-main-set-schedule-admits_at') as HTMLInputElement;
    admits.value = '2026-12-04T20:00';
    admits.dispatchEvent(new Event('input', { bubbles: true }));
    await new Promise((r) => setTimeout(r, 20));
    (root.querySelector('form') as HTMLFormElement).requestSubmit();
    await until(() => root.querySelector('[data-field-error]') !== null);
    expect([...root.querySelectorAll('[data-field-error]')].map((e) => e.getAttribute('data-field-error'))).toEqual([
      'schedule.admits_at',
    ]);
    expect(admits.getAttribute('aria-invalid')).toBe('true');
    expect(document.activeElement).toBe(admits);
  });
});
