// Countdowns run on the server's clock, not the visitor's: the page carries the server's
// "now" at render time, and the difference to the local clock at load is the offset. A
// visitor whose clock is an hour off still sees the right countdown.

export class ServerClock {
  readonly offsetMs: number;

  constructor(serverNowMs: number, localNowMs: number = Date.now()) {
    this.offsetMs = serverNowMs - localNowMs;
  }

  /** The server's time now, estimated from the local clock. */
  now(localNowMs: number = Date.now()): number {
    return localNowMs + this.offsetMs;
  }

  /** Milliseconds until `targetMs` (server time), never negative. */
  remaining(targetMs: number, localNowMs: number = Date.now()): number {
    return Math.max(0, targetMs - this.now(localNowMs));
  }
}

/** `1 d 02:03:04`, `02:03:04`, or `03:04` under an hour. */
export function formatCountdown(ms: number, daysTemplate = '{n} d'): string {
  const total = Math.max(0, Math.ceil(ms / 1000));
  const days = Math.floor(total / 86400);
  const h = Math.floor((total % 86400) / 3600);
  const m = Math.floor((total % 3600) / 60);
  const sec = total % 60;
  const two = (n: number): string => String(n).padStart(2, '0');
  const clock = days > 0 || h > 0 ? `${two(h)}:${two(m)}:${two(sec)}` : `${two(m)}:${two(sec)}`;
  return days > 0 ? `${daysTemplate.replace('{n}', String(days))} ${clock}` : clock;
}
