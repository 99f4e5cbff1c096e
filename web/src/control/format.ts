// Number and time formatting for the control room: dense, unambiguous, the same in every
// locale an operator's browser may have (a 3 a.m. screenshot pasted into a chat must read
// the same to everyone), so English digit grouping is fixed here.

const GROUPED = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

/** A whole count with digit grouping: `1,234,567`. Missing → `–`. */
export function formatCount(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '–';
  return GROUPED.format(Math.round(n));
}

/**
 * A per-second rate with three significant digits and no trailing zeros: `0.01`, `1.5`,
 * `19.8`, `250`, `12,000`. Missing → `–`.
 */
export function formatRate(r: number | null | undefined): string {
  if (r === null || r === undefined || !Number.isFinite(r)) return '–';
  if (r === 0) return '0';
  const abs = Math.abs(r);
  if (abs >= 100) return GROUPED.format(Math.round(r));
  return String(Number(r.toPrecision(3)));
}

/** A span of seconds, coarsest two units: `42 s`, `3 min 05 s`, `2 h 03 min`, `1 d 4 h`. */
export function formatDuration(secs: number | null | undefined): string {
  if (secs === null || secs === undefined || !Number.isFinite(secs) || secs < 0) return '–';
  const s = Math.floor(secs);
  if (s < 60) return `${s} s`;
  const two = (n: number) => String(n).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)} min ${two(s % 60)} s`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ${two(Math.floor((s % 3600) / 60))} min`;
  return `${Math.floor(s / 86_400)} d ${Math.floor((s % 86_400) / 3600)} h`;
}

/** How old a reading is: `0.4 s`, `12 s`, then as {@link formatDuration}. */
export function formatAge(secs: number | null | undefined): string {
  if (secs === null || secs === undefined || !Number.isFinite(secs) || secs < 0) return '–';
  if (secs < 10) return `${secs.toFixed(1)} s`;
  return formatDuration(secs);
}

/** `14:02:07` in the browser's time zone (24 h), for "last update" stamps. */
export function formatClock(ms: number): string {
  const d = new Date(ms);
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

/** `1 visitor` / `3 visitors`. */
export function plural(n: number, one: string, many: string): string {
  return `${formatCount(n)} ${n === 1 ? one : many}`;
}

/** When something happened, in the browser's time zone: `14:02:07` on the day of `nowMs`,
 * `2024-01-02 03:04` on any other. */
export function formatWhen(ms: number, nowMs: number): string {
  if (!Number.isFinite(ms)) return '–';
  const d = new Date(ms);
  const n = new Date(nowMs);
  if (d.getFullYear() === n.getFullYear() && d.getMonth() === n.getMonth() && d.getDate() === n.getDate()) {
    return formatClock(ms);
  }
  const two = (v: number) => String(v).padStart(2, '0');
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}`;
}

/** The honest-ETA figures of a room (docs/fairness.md), as the tile shows them. */
export interface EtaFigures {
  admitted: number;
  within_range: number | null;
  median_error_secs: number | null;
}

/** Below this share admitted within the range shown, the tile says the aim is missed. */
export const ETA_AIM = 0.9;
/** Fewer admissions than this in the hour are too few to call the aim missed. */
export const ETA_MIN_SAMPLE = 20;

/**
 * The room tile's line about ETA honesty: `ETA honesty: 94 % of 1,203 admitted in the last
 * hour within the range shown; median error 3 s`. The share is rounded down, so 99.6 % is
 * never shown as 100 %. `null` when the server does not report it (older servers), so the
 * tile shows nothing.
 */
export function formatEta(eta: Partial<EtaFigures> | null | undefined): { text: string; belowAim: boolean } | null {
  if (!eta || typeof eta !== 'object' || typeof eta.admitted !== 'number' || !Number.isFinite(eta.admitted)) return null;
  const admitted = Math.max(0, eta.admitted);
  const ratio = eta.within_range;
  if (admitted === 0 || typeof ratio !== 'number' || !Number.isFinite(ratio)) {
    return { text: 'ETA honesty: nobody admitted in the last hour to compare with the range shown', belowAim: false };
  }
  const clamped = Math.min(1, Math.max(0, ratio));
  const percent = clamped >= 1 ? 100 : Math.floor(clamped * 100);
  let text = `ETA honesty: ${percent} % of ${formatCount(admitted)} admitted in the last hour within the range shown`;
  const median = eta.median_error_secs;
  if (typeof median === 'number' && Number.isFinite(median) && median >= 0) {
    text += `; median error ${median < 10 && !Number.isInteger(median) ? `${median.toFixed(1)} s` : formatDuration(Math.round(median))}`;
  }
  const belowAim = admitted >= ETA_MIN_SAMPLE && clamped < ETA_AIM;
  if (belowAim) text += ` (below the ${Math.round(ETA_AIM * 100)} % aim)`;
  return { text, belowAim };
}

/** From this share of a cap used, the tile emphasises the line about it. */
export const NEAR_CAP = 0.9;

/** A share of a cap as the tile says it: rounded down, so 99.6 % is never shown as 100 %. */
function percentOf(n: number, cap: number): number {
  const share = Math.max(0, n) / cap;
  return share >= 1 ? 100 : Math.floor(share * 100);
}

/**
 * The room tile's line about the origin in-flight cap (`max_inflight`, docs/visitors.md):
 * `Origin: 3 of 8 in flight (this replica)`, emphasised (`near`) from 90 % of the cap.
 * `null` when the room has no cap (or the server does not report it), so the tile shows
 * nothing.
 */
export function formatInflight(
  inflight: { now: number; max: number } | null | undefined,
): { text: string; near: boolean } | null {
  if (!inflight || typeof inflight !== 'object') return null;
  const { now, max } = inflight;
  if (typeof max !== 'number' || !Number.isFinite(max) || max <= 0) return null;
  const current = typeof now === 'number' && Number.isFinite(now) ? Math.max(0, now) : 0;
  return {
    text: `Origin: ${formatCount(current)} of ${formatCount(max)} in flight (this replica)`,
    near: current / max >= NEAR_CAP,
  };
}

/**
 * The room tile's line about the queue breaker (`max_waiting`, docs/visitors.md):
 * `Line capped at 10,000 (breaker)`, and from 90 % of the cap also how full the line is
 * (`line 98 % full`, emphasised); at the cap, `line full: newcomers are turned away`.
 * `null` when the breaker is off (0) or not reported.
 */
export function formatBreaker(
  maxWaiting: number | null | undefined,
  waiting: number | null | undefined,
): { text: string; fill: string | null; near: boolean } | null {
  if (typeof maxWaiting !== 'number' || !Number.isFinite(maxWaiting) || maxWaiting <= 0) return null;
  const text = `Line capped at ${formatCount(maxWaiting)} (breaker)`;
  if (typeof waiting !== 'number' || !Number.isFinite(waiting)) return { text, fill: null, near: false };
  if (waiting >= maxWaiting) return { text, fill: 'line full: newcomers are turned away', near: true };
  const near = waiting / maxWaiting >= NEAR_CAP;
  return { text, fill: near ? `line ${percentOf(waiting, maxWaiting)} % full` : null, near };
}

/** A latency in ms as the tile shows it: `800 ms`, `1.2 s`. */
export function formatLatency(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${Number((ms / 1000).toPrecision(2))} s`;
}

/**
 * Why closed-loop admission holds the rate below the configured one (docs/fairness.md), e.g.
 * `adaptive: 20/s — origin p95 1.2 s > 800 ms`; null at the configured rate or without it.
 */
export function formatAdaptive(r: {
  rate?: number;
  effective_rate?: number;
  rate_reason?: string;
  adaptive?: {
    origin_p95_ms: number | null;
    origin_error_ratio: number;
    target_latency_ms: number;
    max_error_ratio: number;
  } | null;
}): string | null {
  const a = r.adaptive;
  if (!a || r.effective_rate === undefined || r.rate === undefined || r.effective_rate >= r.rate) return null;
  const head = `adaptive: ${formatRate(r.effective_rate)}/s`;
  const pct = (x: number) => `${Number((x * 100).toPrecision(2))} %`;
  switch (r.rate_reason) {
    case 'latency':
      return a.origin_p95_ms === null
        ? `${head} — origin slow`
        : `${head} — origin p95 ${formatLatency(a.origin_p95_ms)} > ${formatLatency(a.target_latency_ms)}`;
    case 'errors':
      return `${head} — origin 5xx ${pct(a.origin_error_ratio)} > ${pct(a.max_error_ratio)}`;
    default:
      return `${head} — recovering`;
  }
}
