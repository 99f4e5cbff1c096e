// The live stream (GET /__anteroom/events). `position` moves the board, `admitted` goes to
// the address the visitor first asked for, `stalled` says so calmly. If the stream drops
// (the server restarts, the visitor left the line, a network blip), the page closes it and
// reloads on a jittered 2–10 s timer so a crowd does not come back in lockstep; the reload
// rejoins or resumes the visitor's place.

import type { Eta } from './strings';

export type Phase = 'queueing' | 'before_open' | 'draw' | 'closed';

export interface PositionEvent {
  position: number | null;
  waiting: number;
  eta_secs: Eta;
  phase: Phase;
  paused: boolean;
}

export interface LiveHandlers {
  position(event: PositionEvent): void;
  admitted(): void;
  stalled(): void;
  /** The stream is gone; the caller reloads later. */
  lost(): void;
}

export interface EventSourceLike {
  addEventListener(type: string, listener: (event: MessageEvent) => void): void;
  close(): void;
  onerror: ((this: EventSource, ev: Event) => unknown) | null;
}

export const EVENTS_URL = '/__anteroom/events';

/** A delay in [2 s, 10 s), spread by `random`. */
export function jitteredDelay(random: () => number = Math.random): number {
  return 2000 + Math.floor(Math.min(Math.max(random(), 0), 0.999999) * 8000);
}

/**
 * The page's own address without its fragment: navigating there always loads it again
 * (with GET, so a form that was POSTed is not re-submitted), where the same address with a
 * fragment would only scroll.
 */
export function reloadTarget(href: string): string {
  const hash = href.indexOf('#');
  return hash < 0 ? href : href.slice(0, hash);
}

export function connect(
  handlers: LiveHandlers,
  open: (url: string) => EventSourceLike = (url) => new EventSource(url),
): EventSourceLike {
  const es = open(EVENTS_URL);
  let done = false;
  const finish = (): void => {
    done = true;
    es.close();
  };
  es.addEventListener('position', (ev) => {
    let data: PositionEvent;
    try {
      data = JSON.parse(ev.data) as PositionEvent;
    } catch {
      return;
    }
    handlers.position(data);
  });
  es.addEventListener('admitted', () => {
    if (done) return;
    finish();
    handlers.admitted();
  });
  es.addEventListener('stalled', () => handlers.stalled());
  es.onerror = () => {
    if (done) return;
    finish();
    handlers.lost();
  };
  return es;
}
