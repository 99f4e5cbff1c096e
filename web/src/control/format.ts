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
