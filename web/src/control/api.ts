// The admin API as the control room uses it (docs/admin-api.md). Its bodies' types are the
// ones generated from the server's OpenAPI document (./api-types.ts, `npm run
// generate:api-types`), never kept by hand. Every call carries the token as a bearer token;
// every failure becomes an ApiError carrying what the API's problem+json said, so the UI
// can put a field's error next to that field.

import type { components } from './api-types';
import type { EventBody, EventList, RoomEvent } from './events';

export const API_BASE = '/__anteroom/admin/api';

type Schemas = components['schemas'];

/** One room as `GET /rooms` lists it. Without statistics yet only `room` is there. */
export type RoomView = Schemas['RoomStats'];

/** What closed-loop admission's last decision saw (docs/fairness.md). */
export type AdaptiveStats = Schemas['AdaptiveStats'];

/** How well the waits shown matched the waits had, over the last hour (docs/fairness.md, "Honest ETA"). */
export type EtaStats = Schemas['EtaReport'];

export type Status = Schemas['Status'];

export type AuditResult = Schemas['Audit'];

export type Settings = Schemas['Settings'];

/** A room's mode (`PUT …/config` `mode`). */
export type Mode = Settings['mode'];

/** A room's phase, as its stats and `anteroom_room_phase` give it. */
export type Phase = NonNullable<RoomView['phase']>;

/** The fields `PUT …/config` takes, as the form sends them. A value that is not a number is
 * sent as the text typed, so the API (the one judge of valid input) names the field. */
export type ConfigPatch = Partial<Record<'rate' | 'max_active', number | string>> & { mode?: Mode };

/** A change of any room settings, by the file's names, as the settings editor sends it: a
 * value the editor cannot read as what the API wants is sent as typed, so the API (the one
 * judge of valid input) names the field. */
export type RoomChange = Record<string, string | number | boolean | string[] | Record<string, unknown> | null>;

/** One waiting visitor as `GET …/queue` lists them (docs/security.md, "Priority"). */
export type QueueEntry = Schemas['QueueEntry'];

export type QueueResult = Schemas['QueueResult'];

export type FrontResult = Schemas['FrontResult'];

/** Who made a ban: the strike count, a `ban_paths` hit, or an operator. */
export type BanSource = Schemas['BanSource'];

/** One active ban as `GET /bans` lists it (docs/security.md, "Bans and the abuse registry"). */
export type Ban = Schemas['Ban'];

export type BanLogEntry = Schemas['BanLogEntry'];

/** One page of a list, newest first; `next_cursor` asks for the next (older) page. */
export interface Paged {
  limit?: number;
  cursor?: number | null;
}

/** What `POST /bans` takes: `duration_secs` null for a permanent ban. */
export type BanRequest = Schemas['BanRequest'];

/** The fields of a ban the API may name in an error. */
export type BanField = 'target' | 'duration_secs' | 'reason';

/** A duration as an operator types it: `90` (seconds), `90s`, `30m`, `1h`, `2d`, `1w`,
 * `1h30m`, `1.5h` (`min`, `hour(s)`, `day(s)` are read too). Whole seconds, or `null` when
 * it is not a duration; 0 stays 0 so the API (the one judge) says why it is refused. */
export function parseDuration(typed: string): number | null {
  const text = typed.trim().toLowerCase().replace(/\s+/g, '');
  if (text === '') return null;
  if (/^\d+$/.test(text)) return Number.isSafeInteger(Number(text)) ? Number(text) : null;
  const units: Record<string, number> = {
    s: 1, sec: 1, secs: 1, second: 1, seconds: 1,
    m: 60, min: 60, mins: 60, minute: 60, minutes: 60,
    h: 3600, hr: 3600, hrs: 3600, hour: 3600, hours: 3600,
    d: 86_400, day: 86_400, days: 86_400,
    w: 604_800, week: 604_800, weeks: 604_800,
  };
  const part = /(\d+(?:\.\d+)?|\.\d+)([a-z]+)/y;
  let total = 0;
  let at = 0;
  while (at < text.length) {
    part.lastIndex = at;
    const m = part.exec(text);
    if (!m) return null;
    const unit = units[m[2]];
    if (unit === undefined) return null;
    total += Number(m[1]) * unit;
    at = part.lastIndex;
  }
  return Number.isSafeInteger(Math.round(total)) ? Math.round(total) : null;
}

/** The most `GET …/queue` lists at once. */
export const QUEUE_MAX_LIMIT = 1000;

/** A reference as a person typed it, the way the API reads it: hyphens and spaces dropped,
 * upper case, Crockford's look-alikes (O → 0, I and L → 1). `null` unless 8 symbols of the
 * alphabet remain, so the view can say so before asking. */
export function normalizeRef(typed: string): string | null {
  const cleaned = typed
    .replace(/[\s-]/g, '')
    .toUpperCase()
    .replace(/O/g, '0')
    .replace(/[IL]/g, '1');
  return /^[0-9A-HJKMNP-TV-Z]{8}$/.test(cleaned) ? cleaned : null;
}

/** A failed call: the HTTP status (0 when anteroom could not be reached) and the
 * problem+json members. */
export class ApiError extends Error {
  declare readonly status: number;
  declare readonly title: string;
  declare readonly detail: string;
  declare readonly field: string | null;

  constructor(status: number, title: string, detail: string, field: string | null = null) {
    super(detail ? `${title}: ${detail}` : title);
    this.name = 'ApiError';
    this.status = status;
    this.title = title;
    this.detail = detail;
    this.field = field;
  }

  /** The token is missing or wrong: sign in again. */
  get unauthorized(): boolean {
    return this.status === 401;
  }
}

const STATUS_TEXT: Record<number, string> = {
  400: 'Invalid input',
  401: 'Not signed in',
  403: 'Forbidden',
  404: 'Not found',
  405: 'Method not allowed',
  413: 'Body too large',
  422: 'Invalid input',
  429: 'Too many requests',
  500: 'Server error',
  502: 'Bad gateway',
  503: 'Unavailable',
  504: 'Gateway timeout',
};

/** An error response as an ApiError: the problem+json members when the body is one, else
 * the status and the start of whatever the body was (a proxy's HTML error page, say). */
export function parseProblem(status: number, body: string): ApiError {
  const fallbackTitle = STATUS_TEXT[status] ?? `HTTP ${status}`;
  try {
    const value: unknown = JSON.parse(body);
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      const p = value as Record<string, unknown>;
      const title = typeof p.title === 'string' && p.title ? p.title : fallbackTitle;
      const detail = typeof p.detail === 'string' ? p.detail : '';
      const field = typeof p.field === 'string' && p.field ? p.field : null;
      return new ApiError(status, title, detail, field);
    }
  } catch {
    /* not JSON: fall through */
  }
  const text = body.replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim();
  const detail = text.length > 200 ? `${text.slice(0, 199)}…` : text;
  return new ApiError(status, fallbackTitle, detail || `The server answered ${status}.`);
}

/** The part of a field error to show under the field: the API writes
 * `rate: must be a number (got "x"); nothing was changed`, and the field's label already
 * says `rate`. */
export function fieldMessage(error: ApiError): string {
  let text = error.detail || error.title;
  if (error.field && text.startsWith(`${error.field}: `)) text = text.slice(error.field.length + 2);
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/** The fields of the form that differ from the room's current settings. Blank fields and
 * unchanged values are left out; a number is sent as a number, anything else as typed. */
export function buildPatch(
  form: { rate: string; max_active: string },
  current: { rate?: number; max_active?: number },
): ConfigPatch {
  const patch: ConfigPatch = {};
  for (const key of ['rate', 'max_active'] as const) {
    const typed = form[key].trim();
    if (typed === '') continue;
    const n = Number(typed);
    const value = Number.isFinite(n) && /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(typed) ? n : typed;
    if (value !== current[key]) patch[key] = value;
  }
  return patch;
}

function pageQuery(page: Paged): string {
  const query = new URLSearchParams();
  if (page.limit !== undefined) query.set('limit', String(page.limit));
  if (page.cursor !== undefined && page.cursor !== null) query.set('cursor', String(page.cursor));
  const q = query.toString();
  return q ? `?${q}` : '';
}

type Fetch = (input: string, init?: RequestInit) => Promise<Response>;

/** The admin API with one token. */
export class Api {
  private declare readonly token: string;
  private declare readonly fetcher: Fetch;
  private declare readonly base: string;

  constructor(token: string, fetcher: Fetch = (i, init) => fetch(i, init), base = API_BASE) {
    this.token = token;
    this.fetcher = fetcher;
    this.base = base;
  }

  private async call<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.token}`,
      accept: 'application/json',
    };
    if (body !== undefined) headers['content-type'] = 'application/json';
    let response: Response;
    try {
      response = await this.fetcher(`${this.base}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: 'no-store',
        credentials: 'omit',
        signal,
      });
    } catch (e) {
      if (signal?.aborted) throw e;
      throw new ApiError(0, 'Cannot reach anteroom', e instanceof Error ? e.message : String(e));
    }
    const text = await response.text();
    if (!response.ok) throw parseProblem(response.status, text);
    if (response.status === 204) return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new ApiError(response.status, 'Unreadable answer', 'The API answered with something that is not JSON.');
    }
  }

  status(signal?: AbortSignal): Promise<Status> {
    return this.call('GET', '/status', undefined, signal);
  }

  async rooms(signal?: AbortSignal): Promise<RoomView[]> {
    const body = await this.call<Schemas['RoomList']>('GET', '/rooms', undefined, signal);
    return body.rooms;
  }

  configure(room: string, patch: ConfigPatch | RoomChange): Promise<Schemas['ConfigResult']> {
    return this.call('PUT', `/rooms/${encodeURIComponent(room)}/config`, patch);
  }

  /** The room's settings in force, read from the store (`GET …/config`). */
  settings(room: string, signal?: AbortSignal): Promise<Settings> {
    return this.call('GET', `/rooms/${encodeURIComponent(room)}/config`, undefined, signal);
  }

  pause(room: string): Promise<Schemas['PauseResult']> {
    return this.call('POST', `/rooms/${encodeURIComponent(room)}/pause`);
  }

  resume(room: string): Promise<Schemas['PauseResult']> {
    return this.call('POST', `/rooms/${encodeURIComponent(room)}/resume`);
  }

  flush(room: string): Promise<Schemas['FlushResult']> {
    return this.call('POST', `/rooms/${encodeURIComponent(room)}/flush`);
  }

  /** The head of `room`'s line (`limit`, the API's default 50 when left out), or the one
   * waiting visitor with reference `ref` (an empty list when nobody waiting has it). */
  queue(room: string, opts: { limit?: number; ref?: string } = {}, signal?: AbortSignal): Promise<QueueResult> {
    const query = new URLSearchParams();
    if (opts.limit !== undefined) query.set('limit', String(opts.limit));
    if (opts.ref !== undefined) query.set('ref', opts.ref);
    const q = query.toString();
    return this.call('GET', `/rooms/${encodeURIComponent(room)}/queue${q ? `?${q}` : ''}`, undefined, signal);
  }

  /** Moves the waiting visitor with reference `ref` to position 1. */
  moveToFront(room: string, ref: string): Promise<FrontResult> {
    return this.call('POST', `/rooms/${encodeURIComponent(room)}/visitors/${encodeURIComponent(ref)}/front`);
  }

  /** The room's events by `queue_opens_at`, and which one is current. */
  events(room: string, signal?: AbortSignal): Promise<EventList> {
    return this.call('GET', `/rooms/${encodeURIComponent(room)}/events`, undefined, signal);
  }

  /** Adds an event to the room; the server picks its id. */
  createEvent(room: string, body: EventBody): Promise<RoomEvent> {
    return this.call('POST', `/rooms/${encodeURIComponent(room)}/events`, body);
  }

  /** Replaces event `id` of the room whole. */
  updateEvent(room: string, id: string, body: EventBody): Promise<RoomEvent> {
    return this.call('PUT', `/rooms/${encodeURIComponent(room)}/events/${encodeURIComponent(id)}`, body);
  }

  /** Removes event `id` of the room (a 404 ApiError when there is none). */
  deleteEvent(room: string, id: string): Promise<void> {
    return this.call('DELETE', `/rooms/${encodeURIComponent(room)}/events/${encodeURIComponent(id)}`);
  }

  /** Active bans, newest first; `cursor` is the previous page's `next_cursor`. */
  bans(page: Paged = {}, signal?: AbortSignal): Promise<Schemas['BanList']> {
    return this.call('GET', `/bans${pageQuery(page)}`, undefined, signal);
  }

  /** Bans an address or range for `duration_secs`, or permanently with null. */
  ban(request: BanRequest): Promise<Schemas['BanCreated']> {
    return this.call('POST', '/bans', request);
  }

  /** Lifts the ban on exactly `target` (a 404 ApiError when there is none). */
  unban(target: string): Promise<Schemas['Unbanned']> {
    return this.call('DELETE', `/bans/${encodeURIComponent(target.trim())}`);
  }

  /** The ban log (banned, unbanned, expired), newest first, paged like {@link Api.bans}. */
  banLog(page: Paged = {}, signal?: AbortSignal): Promise<Schemas['BanLog']> {
    return this.call('GET', `/bans/log${pageQuery(page)}`, undefined, signal);
  }
}

/** Where the token lives: this tab's sessionStorage only (never localStorage or a cookie),
 * so closing the tab forgets it and no other site's request can carry it. */
export const TOKEN_KEY = 'anteroom.admin_token';

export function loadToken(storage: Pick<Storage, 'getItem'>): string | null {
  try {
    const t = storage.getItem(TOKEN_KEY);
    return t && t.trim() ? t : null;
  } catch {
    return null;
  }
}

export function saveToken(storage: Pick<Storage, 'setItem'>, token: string): void {
  try {
    storage.setItem(TOKEN_KEY, token);
  } catch {
    /* storage disabled: the token lives only as long as the page */
  }
}

export function clearToken(storage: Pick<Storage, 'removeItem'>): void {
  try {
    storage.removeItem(TOKEN_KEY);
  } catch {
    /* nothing stored */
  }
}
