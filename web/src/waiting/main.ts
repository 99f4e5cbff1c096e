// The waiting page's script. The server renders a complete page (it works with no
// JavaScript: a <noscript> meta refresh keeps it moving); this turns the number into a
// split-flap board and keeps it live. Strings, the server's clock and the first state all
// come from the page's #ar-data blob.

import './waiting.css';
import { SplitFlapBoard, digitsOf } from './board';
import { ServerClock, formatCountdown } from './clock';
import { connect, jitteredDelay, reloadTarget, type Phase, type PositionEvent } from './live';
import { fill, formatEta, type Eta, type Strings } from './strings';

export interface PageData {
  strings: Strings;
  position: number | null;
  waiting: number;
  eta_secs: Eta;
  phase: Phase;
  paused: boolean;
  /** The server's clock when it rendered the page (ms since the epoch). */
  server_now_ms: number;
  /** When the current phase ends, on the server's clock (before_open, draw). */
  countdown_to_ms: number | null;
}

export interface Env {
  navigate(url: string): void;
  setTimeout(fn: () => void, ms: number): unknown;
  setInterval(fn: () => void, ms: number): unknown;
  clearInterval(id: unknown): void;
  now(): number;
  random(): number;
  reducedMotion(): boolean;
}

const browserEnv = (): Env => {
  const motion = window.matchMedia?.('(prefers-reduced-motion: reduce)');
  return {
    navigate: (url) => window.location.replace(url),
    setTimeout: (fn, ms) => window.setTimeout(fn, ms),
    setInterval: (fn, ms) => window.setInterval(fn, ms),
    clearInterval: (id) => window.clearInterval(id as number),
    now: () => Date.now(),
    random: () => Math.random(),
    reducedMotion: () => motion?.matches ?? false,
  };
};

export class WaitingPage {
  private readonly data: PageData;
  private readonly env: Env;
  private readonly clock: ServerClock;
  private board: SplitFlapBoard | null = null;
  private countdownTimer: unknown = null;
  private phase: Phase;
  leaving = false;

  constructor(private readonly doc: Document, data: PageData, env: Env) {
    this.data = data;
    this.env = env;
    this.clock = new ServerClock(data.server_now_ms, env.now());
    this.phase = data.phase;
    const boardEl = this.byId('ar-board');
    if (boardEl && data.position !== null) {
      const width = Math.max(digitsOf(data.position), digitsOf(data.waiting));
      this.board = new SplitFlapBoard(boardEl, data.position, width, {
        reducedMotion: env.reducedMotion,
      });
    }
    this.doc.documentElement.classList.add('ar-js');
    this.showPhase(data.phase, data.paused);
  }

  private byId(id: string): HTMLElement | null {
    return this.doc.getElementById(id);
  }

  private setText(id: string, text: string): void {
    const e = this.byId(id);
    if (e && e.textContent !== text) e.textContent = text;
  }

  private showPhase(phase: Phase, paused: boolean): void {
    this.phase = phase;
    const root = this.byId('ar-root');
    if (root) root.dataset.phase = phase;
    const queue = this.byId('ar-queue');
    const countdown = this.byId('ar-countdown');
    if (queue) queue.hidden = phase !== 'queueing';
    if (countdown) countdown.hidden = !(phase === 'before_open' || phase === 'draw');
    const s = this.data.strings;
    if (phase === 'closed') this.setText('ar-status', s.closed);
    else this.setText('ar-status', paused ? s.paused : '');
    if (phase === 'before_open' || phase === 'draw') {
      this.setText('ar-countdown-label', phase === 'draw' ? s.doors_open_in : s.opens_in);
      this.startCountdown();
    } else {
      this.stopCountdown();
    }
  }

  private startCountdown(): void {
    const target = this.data.countdown_to_ms;
    if (target === null) return;
    const tick = (): void => {
      const left = this.clock.remaining(target, this.env.now());
      this.setText('ar-countdown-value', formatCountdown(left, this.data.strings.days));
      if (left <= 0) {
        this.stopCountdown();
        // The phase is over: the server decides what comes next.
        this.reloadLater();
      }
    };
    tick();
    if (this.countdownTimer === null && this.clock.remaining(target, this.env.now()) > 0) {
      this.countdownTimer = this.env.setInterval(tick, 1000);
    }
  }

  private stopCountdown(): void {
    if (this.countdownTimer !== null) this.env.clearInterval(this.countdownTimer);
    this.countdownTimer = null;
  }

  update(event: PositionEvent): void {
    if (event.phase !== this.phase) this.showPhase(event.phase, event.paused);
    else if (this.phase !== 'closed')
      this.setText('ar-status', event.paused ? this.data.strings.paused : '');
    this.setText('ar-waiting', String(event.waiting));
    this.setText('ar-entered', String(event.waiting));
    this.setText('ar-eta', formatEta(event.eta_secs, this.data.strings));
    if (event.position !== null && this.board) {
      const before = this.board.value;
      this.board.set(event.position);
      if (before !== event.position) {
        this.setText('ar-live', fill(this.data.strings.announce, { n: event.position }));
      }
    }
  }

  stalled(): void {
    this.setText('ar-status', this.data.strings.stalled);
  }

  admitted(href: string): void {
    this.leaving = true;
    this.setText('ar-status', this.data.strings.admitted);
    this.env.navigate(reloadTarget(href));
  }

  reloadLater(href?: string): void {
    if (this.leaving) return;
    this.leaving = true;
    this.env.setTimeout(
      () => this.env.navigate(reloadTarget(href ?? this.doc.location.href)),
      jitteredDelay(this.env.random),
    );
  }
}

export function readData(doc: Document): PageData | null {
  const blob = doc.getElementById('ar-data');
  if (!blob?.textContent) return null;
  try {
    return JSON.parse(blob.textContent) as PageData;
  } catch {
    return null;
  }
}

function start(): void {
  const data = readData(document);
  if (!data) return;
  const env = browserEnv();
  const page = new WaitingPage(document, data, env);
  if (typeof EventSource === 'undefined') {
    page.reloadLater();
    return;
  }
  connect({
    position: (e) => page.update(e),
    admitted: () => page.admitted(window.location.href),
    stalled: () => page.stalled(),
    lost: () => page.reloadLater(),
  });
}

if (typeof document !== "undefined") {
  start();
}
