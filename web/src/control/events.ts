// A room's events as the control room edits them: the API's shapes (`…/rooms/{room}/events`,
// docs/admin-api.md), and the conversions between the operator's local time, typed into
// `datetime-local` inputs, and the RFC 3339 instants the API takes and gives. Times are
// always sent with the offset they were typed in, so what the audit log records reads as
// the operator meant it, and always shown with the offset, so a time read off a shared
// screen is never ambiguous.

import type { components } from './api-types';

type Schemas = components['schemas'];

/** Where an event stands against the store's clock: `current` is the one in force. */
export type EventState = Schemas['Event']['state'];

/** What `POST …/events` and `PUT …/events/{id}` take. A number the form cannot read as one
 * is sent as typed, so the API (the one judge of valid input) names the field. */
export type EventBody = Omit<Schemas['EventBody'], 'rate' | 'max_active'> & {
  rate?: number | string | null;
  max_active?: number | string | null;
};

/** One event as the API lists it. */
export type RoomEvent = Schemas['Event'];

/** `GET …/events`: the room's events by `queue_opens_at`, and the current one's id. */
export type EventList = Schemas['EventList'];

/** The current event as a room's stats name it. */
export type EventRef = Schemas['EventNow'];

/** The fields of an event the API may name in an error, in the form's order. */
export const EVENT_FIELDS = [
  'name',
  'queue_opens_at',
  'admits_at',
  'closes_at',
  'rate',
  'max_active',
  'title',
  'message',
  'lottery',
] as const;

export type EventField = (typeof EVENT_FIELDS)[number];

/** The event form as typed: `datetime-local` values (`2026-12-04T21:30:05`) for the times,
 * text for the rest, `''`/`'true'`/`'false'` for the lottery (`''`: the room's own). */
export type EventForm = Record<EventField, string>;

export const EMPTY_FORM: EventForm = {
  name: '',
  queue_opens_at: '',
  admits_at: '',
  closes_at: '',
  rate: '',
  max_active: '',
  title: '',
  message: '',
  lottery: '',
};

const two = (n: number) => String(n).padStart(2, '0');

/** `UTC+01:00`, `UTC-04:00`, `UTC+05:30`: the browser's offset from UTC at `d`. */
export function offsetLabel(d: Date): string {
  const off = -d.getTimezoneOffset();
  const a = Math.abs(off);
  return `UTC${off < 0 ? '-' : '+'}${two(Math.floor(a / 60))}:${two(a % 60)}`;
}

/** `d` as RFC 3339 in the browser's time zone, to the second, with its offset:
 * `2026-12-04T21:30:05+01:00`. */
export function toRfc3339Local(d: Date): string {
  const off = offsetLabel(d).slice(3);
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())}T${two(d.getHours())}:${two(
    d.getMinutes(),
  )}:${two(d.getSeconds())}${off}`;
}

const LOCAL = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?$/;

/** A `datetime-local` value as RFC 3339 with the offset the browser's time zone has then:
 * `2026-12-04T21:30` in Paris → `2026-12-04T21:30:00+01:00`. A time that does not exist
 * there (skipped by a clock change) is moved forward as the browser moves it; a repeated
 * one is the first. `null` when `local` is not a date and time. */
export function localToRfc3339(local: string): string | null {
  const m = LOCAL.exec(local.trim());
  if (!m) return null;
  const [y, mo, da, h, mi, s] = m.slice(1, 7).map((v) => Number(v ?? 0));
  if (mo < 1 || mo > 12 || h > 23 || mi > 59 || s > 59) return null;
  const d = new Date(2000, 0, 1, 0, 0, 0, 0);
  d.setFullYear(y, mo - 1, da);
  d.setHours(h, mi, s, 0);
  // 31 February and the like roll over into another month: not a date.
  if (Number.isNaN(d.getTime()) || d.getMonth() !== mo - 1) return null;
  return toRfc3339Local(d);
}

/** An RFC 3339 instant as a `datetime-local` value in the browser's time zone, to the
 * second (`''` when it is not one), so an event is edited in the operator's time. */
export function rfc3339ToLocal(instant: string | null | undefined): string {
  if (!instant) return '';
  const ms = Date.parse(instant);
  if (Number.isNaN(ms)) return '';
  const d = new Date(ms);
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())}T${two(d.getHours())}:${two(
    d.getMinutes(),
  )}:${two(d.getSeconds())}`;
}

/** An RFC 3339 instant as the list shows it, in the browser's time zone with the offset:
 * `2026-12-04 21:30:05 UTC+01:00`. What the API gave when it does not parse. */
export function formatInstant(instant: string): string {
  const ms = Date.parse(instant);
  if (Number.isNaN(ms)) return instant;
  const d = new Date(ms);
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(
    d.getMinutes(),
  )}:${two(d.getSeconds())} ${offsetLabel(d)}`;
}

/** The browser's time zone as the form names it: `Europe/Paris (now UTC+01:00)`. */
export function zoneLabel(now: Date = new Date()): string {
  let zone = '';
  try {
    zone = Intl.DateTimeFormat().resolvedOptions().timeZone ?? '';
  } catch {
    /* no Intl time zones: the offset alone */
  }
  return zone ? `${zone} (now ${offsetLabel(now)})` : offsetLabel(now);
}

/** An event as the form shows it for editing. */
export function eventToForm(e: EventBody): EventForm {
  const text = (v: unknown) => (v === undefined || v === null ? '' : String(v));
  return {
    name: e.name ?? '',
    queue_opens_at: rfc3339ToLocal(e.queue_opens_at),
    admits_at: rfc3339ToLocal(e.admits_at),
    closes_at: rfc3339ToLocal(e.closes_at),
    rate: text(e.rate),
    max_active: text(e.max_active),
    title: e.title ?? '',
    message: e.message ?? '',
    lottery: e.lottery === undefined || e.lottery === null ? '' : String(e.lottery),
  };
}

const NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;

/** The form as the API's body, or what is wrong with it before asking: a time that is
 * required and missing, or not a date and time. Blank overrides are left out (the room's
 * own setting applies); a number is sent as a number, anything else as typed. */
export function formToBody(form: EventForm): { body: EventBody } | { errors: Partial<Record<EventField, string>> } {
  const errors: Partial<Record<EventField, string>> = {};
  const time = (field: 'queue_opens_at' | 'admits_at' | 'closes_at', required: boolean): string | null => {
    const typed = form[field].trim();
    if (typed === '') {
      if (required) errors[field] = 'Enter a date and a time.';
      return null;
    }
    const instant = localToRfc3339(typed);
    if (instant === null) errors[field] = 'Not a date and a time.';
    return instant;
  };
  const queueOpens = time('queue_opens_at', true);
  const admits = time('admits_at', true);
  const closes = time('closes_at', false);
  if (Object.keys(errors).length > 0 || queueOpens === null || admits === null) return { errors };
  const body: EventBody = { name: form.name.trim(), queue_opens_at: queueOpens, admits_at: admits, closes_at: closes };
  for (const key of ['rate', 'max_active'] as const) {
    const typed = form[key].trim();
    if (typed !== '') body[key] = NUMBER.test(typed) && Number.isFinite(Number(typed)) ? Number(typed) : typed;
  }
  if (form.title.trim() !== '') body.title = form.title;
  if (form.message.trim() !== '') body.message = form.message;
  if (form.lottery === 'true' || form.lottery === 'false') body.lottery = form.lottery === 'true';
  return { body };
}
