// Everything the page says comes from the server, in the visitor's language (it negotiates
// Accept-Language); the script keeps no catalog of its own. `{n}`, `{min}` and `{max}` are
// filled in here.

export interface Strings {
  announce: string; // "You are number {n} in line."
  eta_under_minute: string;
  eta_estimating: string; // until the room has seen its line move enough for a range
  eta_secs: string; // "{n} s"
  eta_mins: string; // "{n} min"
  eta_range: string; // "{min} – {max}"
  paused: string;
  stalled: string;
  admitted: string;
  reconnecting: string;
  opens_in: string;
  doors_open_in: string;
  days: string; // "{n} d"
  closed: string;
}

export function fill(template: string, values: Record<string, string | number>): string {
  return template.replace(/\{(\w+)\}/g, (whole, key: string) =>
    key in values ? String(values[key]) : whole,
  );
}

export interface Eta {
  min: number;
  max: number;
  /** The room has not seen its line move enough to stand behind a range yet. */
  estimating?: boolean;
}

/** The estimated wait as the page shows it: a range, never negative, never "0 s". */
export function formatEta(eta: Eta | undefined, s: Strings): string {
  if (eta?.estimating) return s.eta_estimating;
  if (!eta || !(eta.max > 0)) return s.eta_under_minute;
  const one = (secs: number): string =>
    secs < 90
      ? fill(s.eta_secs, { n: Math.max(1, Math.round(secs)) })
      : fill(s.eta_mins, { n: Math.round(secs / 60) });
  const min = Math.max(0, Math.min(eta.min, eta.max));
  const a = one(min);
  const b = one(eta.max);
  return a === b ? b : fill(s.eta_range, { min: a, max: b });
}
