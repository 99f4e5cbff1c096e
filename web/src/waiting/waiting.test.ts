import { beforeEach, describe, expect, it, vi } from 'vitest';
import { SplitFlapBoard, digitsOf, pad } from './board';
import { ServerClock, formatCountdown } from './clock';
import { connect, jitteredDelay, reloadTarget, type EventSourceLike } from './live';
import { WaitingPage, readData, type Env, type PageData } from './main';
import { fill, formatEta, type Strings } from './strings';

const strings: Strings = {
  announce: 'You are number {n} in line.',
  eta_under_minute: 'under a minute',
  eta_estimating: 'estimating…',
  eta_secs: '{n} s',
  eta_mins: '{n} min',
  eta_range: '{min} – {max}',
  paused: 'Paused.',
  stalled: 'Trouble reaching the line.',
  admitted: 'Your turn!',
  reconnecting: 'Reconnecting…',
  opens_in: 'The line opens in',
  doors_open_in: 'Doors open in',
  days: '{n} d',
  closed: 'Closed.',
};

describe('board', () => {
  let root: HTMLElement;
  beforeEach(() => {
    document.body.innerHTML = '<div id="b"></div>';
    root = document.getElementById('b')!;
  });

  it('pads to a stable width', () => {
    expect(pad(7, 3)).toBe('007');
    expect(pad(1234, 3)).toBe('1234');
    expect(digitsOf(0)).toBe(1);
    expect(digitsOf(120)).toBe(3);
    const board = new SplitFlapBoard(root, 7, 3);
    expect(board.text).toBe('007');
    expect(root.querySelectorAll('.ar-flap')).toHaveLength(3);
    expect(root.querySelectorAll('.ar-lead')).toHaveLength(2);
  });

  it('turns over only the digits that changed', () => {
    const board = new SplitFlapBoard(root, 120, 3, { reducedMotion: () => true });
    const flaps = [...root.querySelectorAll<HTMLElement>('.ar-flap')];
    expect(board.set(119)).toEqual([1, 2]);
    expect(board.text).toBe('119');
    expect(flaps.map((f) => f.dataset.digit)).toEqual(['1', '1', '9']);
    expect(flaps.map((f) => f.dataset.flips ?? '0')).toEqual(['0', '1', '1']);
    expect(board.set(119)).toEqual([]);
    // Same elements: the board is updated in place, not rebuilt.
    expect([...root.querySelectorAll('.ar-flap')]).toEqual(flaps);
  });

  it('grows only when a number needs more digits, never shrinks', () => {
    const board = new SplitFlapBoard(root, 9, 1, { reducedMotion: () => true });
    board.set(12);
    expect(board.text).toBe('12');
    board.set(3);
    expect(board.text).toBe('03');
    expect(board.width).toBe(2);
  });

  it('animates with two leaves unless reduced motion is asked for', () => {
    const animate = vi.fn(() => ({
      cancel: vi.fn(),
      finished: new Promise(() => {}),
    }));
    (HTMLElement.prototype as unknown as { animate: unknown }).animate = animate;
    try {
      let reduced = false;
      const board = new SplitFlapBoard(root, 5, 1, { reducedMotion: () => reduced });
      board.set(4);
      expect(animate).toHaveBeenCalledTimes(2);
      expect(root.querySelector('.ar-flap')!.classList.contains('ar-flipping')).toBe(true);
      reduced = true;
      board.set(3);
      expect(animate).toHaveBeenCalledTimes(2);
      expect(root.querySelector('.ar-flap')!.classList.contains('ar-flipping')).toBe(false);
      expect(root.querySelector('.ar-top .ar-face')!.textContent).toBe('3');
    } finally {
      delete (HTMLElement.prototype as unknown as { animate?: unknown }).animate;
    }
  });
});

describe('strings and time', () => {
  it('fills placeholders', () => {
    expect(fill('{a} and {b} {c}', { a: 1, b: 'x' })).toBe('1 and x {c}');
  });

  it('formats the wait as a range, never negative', () => {
    expect(formatEta({ min: 0, max: 0 }, strings)).toBe('under a minute');
    expect(formatEta({ min: -5, max: -1 }, strings)).toBe('under a minute');
    expect(formatEta({ min: 10, max: 40 }, strings)).toBe('10 s – 40 s');
    expect(formatEta({ min: 120, max: 300 }, strings)).toBe('2 min – 5 min');
    expect(formatEta({ min: 120, max: 120, estimating: true }, strings)).toBe('estimating…');
    expect(formatEta({ min: 300, max: 300 }, strings)).toBe('5 min');
    expect(formatEta({ min: 0, max: 20 }, strings)).toBe('1 s – 20 s');
  });

  it('counts down on the server clock, not the visitor’s', () => {
    // The visitor's clock is an hour fast.
    const serverNow = 1_700_000_000_000;
    const local = serverNow + 3_600_000;
    const clock = new ServerClock(serverNow, local);
    expect(clock.offsetMs).toBe(-3_600_000);
    expect(clock.remaining(serverNow + 90_000, local)).toBe(90_000);
    expect(clock.remaining(serverNow + 90_000, local + 30_000)).toBe(60_000);
    expect(clock.remaining(serverNow - 1, local)).toBe(0);
    expect(formatCountdown(90_000)).toBe('01:30');
    expect(formatCountdown(3_723_000)).toBe('01:02:03');
    expect(formatCountdown(90_061_000, '{n} T')).toBe('1 T 01:01:01');
    expect(formatCountdown(-5)).toBe('00:00');
    expect(formatCountdown(500)).toBe('00:01');
  });

  it('jitters reloads between 2 and 10 seconds', () => {
    expect(jitteredDelay(() => 0)).toBe(2000);
    expect(jitteredDelay(() => 0.5)).toBe(6000);
    expect(jitteredDelay(() => 0.9999999)).toBeLessThan(10_000);
    expect(jitteredDelay(() => 2)).toBeLessThan(10_000);
    for (let i = 0; i < 100; i++) {
      const d = jitteredDelay();
      expect(d).toBeGreaterThanOrEqual(2000);
      expect(d).toBeLessThan(10_000);
    }
  });

  it('reloads the address without its fragment', () => {
    expect(reloadTarget('http://x/shop?a=1#top')).toBe('http://x/shop?a=1');
    expect(reloadTarget('http://x/shop?a=1')).toBe('http://x/shop?a=1');
  });
});

class FakeSource implements EventSourceLike {
  listeners = new Map<string, (e: MessageEvent) => void>();
  closed = false;
  onerror: ((this: EventSource, ev: Event) => unknown) | null = null;
  addEventListener(type: string, listener: (e: MessageEvent) => void): void {
    this.listeners.set(type, listener);
  }
  close(): void {
    this.closed = true;
  }
  emit(type: string, data: unknown): void {
    this.listeners.get(type)!({ data: JSON.stringify(data) } as MessageEvent);
  }
}

describe('live stream', () => {
  it('dispatches events and closes on admission or error', () => {
    const source = new FakeSource();
    const h = { position: vi.fn(), admitted: vi.fn(), stalled: vi.fn(), lost: vi.fn() };
    let url = '';
    connect(h, (u) => {
      url = u;
      return source;
    });
    expect(url).toBe('/__anteroom/events');
    source.emit('position', { position: 3, waiting: 9 });
    expect(h.position).toHaveBeenCalledWith({ position: 3, waiting: 9 });
    source.listeners.get('position')!({ data: 'not json' } as MessageEvent);
    expect(h.position).toHaveBeenCalledTimes(1);
    source.emit('stalled', {});
    expect(h.stalled).toHaveBeenCalled();
    source.emit('admitted', {});
    expect(source.closed).toBe(true);
    expect(h.admitted).toHaveBeenCalledTimes(1);
    // The error that follows the close is not a lost stream.
    source.onerror!.call(undefined as unknown as EventSource, new Event('error'));
    expect(h.lost).not.toHaveBeenCalled();
  });

  it('treats an error as a lost stream', () => {
    const source = new FakeSource();
    const h = { position: vi.fn(), admitted: vi.fn(), stalled: vi.fn(), lost: vi.fn() };
    connect(h, () => source);
    source.onerror!.call(undefined as unknown as EventSource, new Event('error'));
    expect(source.closed).toBe(true);
    expect(h.lost).toHaveBeenCalledTimes(1);
  });
});

const PAGE = `
<main id="ar-root">
  <section id="ar-queue"><div id="ar-board" aria-hidden="true">12</div>
  <p id="ar-live" aria-live="polite"></p><dd id="ar-waiting"></dd><dd id="ar-eta"></dd></section>
  <section id="ar-countdown" hidden><p id="ar-countdown-label"></p><p id="ar-countdown-value"></p>
  <dd id="ar-entered"></dd></section>
  <p id="ar-status"></p>
</main>`;

function fakeEnv(now: number): Env & { navigated: string[]; timers: [() => void, number][]; t: number } {
  const env = {
    navigated: [] as string[],
    timers: [] as [() => void, number][],
    t: now,
    navigate(url: string) {
      env.navigated.push(url);
    },
    setTimeout(fn: () => void, ms: number) {
      env.timers.push([fn, ms]);
      return env.timers.length;
    },
    setInterval(fn: () => void, ms: number) {
      env.timers.push([fn, ms]);
      return env.timers.length;
    },
    clearInterval() {},
    now: () => env.t,
    random: () => 0.25,
    reducedMotion: () => true,
  };
  return env;
}

function data(over: Partial<PageData> = {}): PageData {
  return {
    strings,
    position: 12,
    waiting: 40,
    eta_secs: { min: 10, max: 20 },
    phase: 'queueing',
    paused: false,
    server_now_ms: 1_000_000,
    countdown_to_ms: null,
    ...over,
  };
}

describe('waiting page', () => {
  beforeEach(() => {
    document.body.innerHTML = PAGE;
  });

  it('reads its data blob', () => {
    document.body.innerHTML += `<script type="application/json" id="ar-data">${JSON.stringify(data())}</script>`;
    expect(readData(document)?.position).toBe(12);
  });

  it('moves the board and announces the position', () => {
    const env = fakeEnv(1_000_000);
    const page = new WaitingPage(document, data(), env);
    expect(document.getElementById('ar-board')!.querySelectorAll('.ar-flap')).toHaveLength(2);
    page.update({ position: 9, waiting: 37, eta_secs: { min: 5, max: 9 }, phase: 'queueing', paused: true });
    expect(document.querySelectorAll<HTMLElement>('.ar-flap')[1].dataset.digit).toBe('9');
    expect(document.querySelectorAll<HTMLElement>('.ar-flap')[0].dataset.digit).toBe('0');
    expect(document.getElementById('ar-live')!.textContent).toBe('You are number 9 in line.');
    expect(document.getElementById('ar-waiting')!.textContent).toBe('37');
    expect(document.getElementById('ar-eta')!.textContent).toBe('5 s – 9 s');
    expect(document.getElementById('ar-status')!.textContent).toBe('Paused.');
    page.stalled();
    expect(document.getElementById('ar-status')!.textContent).toBe('Trouble reaching the line.');
    expect(env.navigated).toEqual([]);
  });

  it('goes to the address first asked for when admitted, once', () => {
    const env = fakeEnv(1_000_000);
    const page = new WaitingPage(document, data(), env);
    page.admitted('http://shop.test/item?id=42#reviews');
    expect(env.navigated).toEqual(['http://shop.test/item?id=42']);
    page.reloadLater('http://shop.test/item?id=42');
    expect(env.timers).toHaveLength(0);
  });

  it('reloads on a jittered timer when the stream is lost', () => {
    const env = fakeEnv(1_000_000);
    const page = new WaitingPage(document, data(), env);
    page.reloadLater('http://shop.test/a?b=1');
    page.reloadLater('http://shop.test/a?b=1');
    expect(env.timers).toHaveLength(1);
    expect(env.timers[0][1]).toBe(4000);
    env.timers[0][0]();
    expect(env.navigated).toEqual(['http://shop.test/a?b=1']);
  });

  it('counts down to the doors opening on server time in the draw', () => {
    // Visitor clock 10 minutes slow; doors open 90 s after the server rendered the page.
    const env = fakeEnv(1_000_000 - 600_000);
    new WaitingPage(
      document,
      data({ phase: 'draw', position: null, countdown_to_ms: 1_000_000 + 90_000 }),
      env,
    );
    expect(document.getElementById('ar-queue')!.hidden).toBe(true);
    expect(document.getElementById('ar-countdown')!.hidden).toBe(false);
    expect(document.getElementById('ar-countdown-label')!.textContent).toBe('Doors open in');
    expect(document.getElementById('ar-countdown-value')!.textContent).toBe('01:30');
    const [tick, every] = env.timers[0];
    expect(every).toBe(1000);
    env.t += 30_000;
    tick();
    expect(document.getElementById('ar-countdown-value')!.textContent).toBe('01:00');
    env.t += 60_000;
    tick();
    expect(document.getElementById('ar-countdown-value')!.textContent).toBe('00:00');
    // At zero the server decides what comes next: a jittered reload.
    expect(env.timers.some(([, ms]) => ms >= 2000 && ms < 10_000)).toBe(true);
  });

  it('says when the line opens before it does', () => {
    const env = fakeEnv(1_000_000);
    new WaitingPage(
      document,
      data({ phase: 'before_open', position: null, countdown_to_ms: 1_000_000 + 3_723_000 }),
      env,
    );
    expect(document.getElementById('ar-countdown-label')!.textContent).toBe('The line opens in');
    expect(document.getElementById('ar-countdown-value')!.textContent).toBe('01:02:03');
  });
});
