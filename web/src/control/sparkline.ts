// The queue-depth history behind each room's sparkline: samples kept in the browser (the
// API has no history), trimmed to a window, and scaled into an SVG path. Pure functions so
// the scaling is unit-tested.

export interface Sample {
  /** When it was read, ms since the epoch (the browser's clock). */
  t: number;
  /** Visitors waiting. */
  v: number;
}

/** How much history a sparkline shows. */
export const WINDOW_MS = 5 * 60 * 1000;

/** Two samples further apart than this are drawn with a gap between them, not joined: the
 * control room could not read the room in between, and a line would invent data. */
export const GAP_MS = 5_000;

/** `samples` plus `sample`, without anything older than `windowMs` before it. Returns a
 * new array (state is replaced, not mutated). A sample older than the last is dropped. */
export function addSample(samples: readonly Sample[], sample: Sample, windowMs = WINDOW_MS): Sample[] {
  const last = samples[samples.length - 1];
  if (last && sample.t < last.t) return samples.slice();
  const from = sample.t - windowMs;
  let first = 0;
  while (first < samples.length && samples[first].t < from) first++;
  return [...samples.slice(first), sample];
}

/** The smallest of 1, 2, 5 × 10ⁿ that is at least `max` (and at least 1), so the axis
 * reads in round numbers and a flat empty line sits on the floor. */
export function niceCeiling(max: number): number {
  if (!Number.isFinite(max) || max <= 1) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(max));
  for (const step of [1, 2, 5, 10]) {
    if (step * magnitude >= max) return step * magnitude;
  }
  return 10 * magnitude;
}

export interface SparklineGeometry {
  /** The line, as SVG path data (`M x y L x y …`, a new `M` after every gap). */
  line: string;
  /** The area under the line, closed to the floor, one sub-path per unbroken run. */
  area: string;
  /** The top of the scale (a {@link niceCeiling}). */
  top: number;
  /** The largest sample in the window. */
  peak: number;
}

export interface SparklineBox {
  width: number;
  height: number;
  /** The right edge's time (ms). */
  now: number;
  windowMs?: number;
  gapMs?: number;
}

const round = (n: number) => Math.round(n * 10) / 10;

/** Scales samples into a `width` × `height` box: time runs left (now − window) to right
 * (now), depth bottom (0) to top ({@link niceCeiling} of the peak). */
export function sparkline(samples: readonly Sample[], box: SparklineBox): SparklineGeometry {
  const windowMs = box.windowMs ?? WINDOW_MS;
  const gapMs = box.gapMs ?? GAP_MS;
  const from = box.now - windowMs;
  const shown = samples.filter((s) => s.t >= from && s.t <= box.now);
  const peak = shown.reduce((m, s) => Math.max(m, s.v), 0);
  const top = niceCeiling(peak);
  const x = (t: number) => round(((t - from) / windowMs) * box.width);
  const y = (v: number) => round(box.height - (Math.max(0, v) / top) * box.height);
  const runs: Sample[][] = [];
  for (const s of shown) {
    const run = runs[runs.length - 1];
    if (run && s.t - run[run.length - 1].t <= gapMs) run.push(s);
    else runs.push([s]);
  }
  const line = runs
    .map((run) => run.map((s, i) => `${i === 0 ? 'M' : 'L'}${x(s.t)} ${y(s.v)}`).join(' '))
    .join(' ');
  const area = runs
    .filter((run) => run.length > 1)
    .map((run) => {
      const path = run.map((s, i) => `${i === 0 ? 'M' : 'L'}${x(s.t)} ${y(s.v)}`).join(' ');
      return `${path} L${x(run[run.length - 1].t)} ${box.height} L${x(run[0].t)} ${box.height} Z`;
    })
    .join(' ');
  return { line, area, top, peak };
}

/** What a screen reader hears for the sparkline. */
export function describeHistory(samples: readonly Sample[], now: number, windowMs = WINDOW_MS): string {
  const shown = samples.filter((s) => s.t >= now - windowMs && s.t <= now);
  if (shown.length === 0) return 'Queue depth: no readings yet.';
  const first = shown[0];
  const last = shown[shown.length - 1];
  const peak = shown.reduce((m, s) => Math.max(m, s.v), 0);
  const span = Math.max(1, Math.round((last.t - first.t) / 1000));
  return `Queue depth over the last ${span} s: from ${first.v} to ${last.v} waiting, peak ${peak}.`;
}
