// Pure helpers of the Bans view (docs/security.md, "Bans and the abuse registry"): how long a ban has left,
// counted on the server's clock, and the words for sources and log actions.
import type { Ban } from './api';
import { formatDuration } from './format';

/**
 * When a ban ends, on this browser's clock: the server said `remaining_secs` when its answer
 * arrived (`receivedAt`, local ms), so the countdown runs on the server's clock whatever the
 * browser's clock says. `remaining_secs` is rounded up, so each reading can only be late by
 * up to a second: the earliest estimate so far (`previous`, for the same ban) is kept, which
 * also keeps the countdown from jumping back up between polls. `null` for a permanent ban.
 */
export function banDeadline(ban: Pick<Ban, 'remaining_secs' | 'permanent'>, receivedAt: number, previous?: number | null): number | null {
  if (ban.permanent || ban.remaining_secs === null || !Number.isFinite(ban.remaining_secs)) return null;
  const estimate = receivedAt + Math.max(0, ban.remaining_secs) * 1000;
  return previous === undefined || previous === null ? estimate : Math.min(previous, estimate);
}

/** The key a ban's deadline is remembered under: the same target banned again (a new
 * `until`) is a new ban. */
export function banKey(ban: Pick<Ban, 'target' | 'until'>): string {
  return `${ban.target} ${ban.until ?? 'permanent'}`;
}

/** What the "Time left" column says: `permanent`, `59 min 58 s`, or `ending` once the
 * countdown has run out and the server has yet to lift it. */
export function formatTimeLeft(deadline: number | null, now: number): string {
  if (deadline === null) return 'permanent';
  const left = Math.ceil((deadline - now) / 1000);
  return left <= 0 ? 'ending' : formatDuration(left);
}

const SOURCES: Record<string, string> = {
  automatic: 'automatic (strikes)',
  ban_path: 'ban path',
  admin: 'admin',
};

export function sourceLabel(source: string): string {
  return SOURCES[source] ?? source;
}

const ACTIONS: Record<string, string> = {
  banned: 'banned',
  unbanned: 'unbanned',
  expired: 'expired',
};

export function actionLabel(action: string): string {
  return ACTIONS[action] ?? action;
}

/** How long a ban of `secs` is, for the confirmation after banning: `for 1 h 00 min`, or
 * `permanently`. */
export function describeLength(secs: number | null): string {
  return secs === null ? 'permanently' : `for ${formatDuration(secs)}`;
}

/** An RFC 3339 time from the API as ms, or NaN. */
export function parseTime(rfc3339: string | null | undefined): number {
  return rfc3339 ? Date.parse(rfc3339) : NaN;
}
