// The split-flap board. Each digit is a flap of two halves; when a digit changes, the old
// top leaf falls (0 → -90°) and the new bottom leaf lands (90° → 0), a quarter second in
// all. Only the digits that changed move. The width is stable: zero-padded to the digits of
// the first number shown (or the line's length), and it only grows if a number needs it.
// With prefers-reduced-motion, digits change in place with no movement.

export const FLIP_MS = 250;

export interface BoardOptions {
  /** Whether to skip the animation; asked at every change so a settings change applies. */
  reducedMotion?: () => boolean;
  durationMs?: number;
}

export function digitsOf(n: number): number {
  return String(Math.max(0, Math.floor(n))).length;
}

/** `n` zero-padded to `width` digits (wider if it needs to be). */
export function pad(n: number, width: number): string {
  return String(Math.max(0, Math.floor(n))).padStart(width, '0');
}

function el(tag: string, cls: string, text?: string): HTMLElement {
  const e = document.createElement(tag);
  e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

class Flap {
  readonly root: HTMLElement;
  private readonly top: HTMLElement;
  private readonly bottom: HTMLElement;
  private readonly leafTop: HTMLElement;
  private readonly leafBottom: HTMLElement;
  private running: Animation[] = [];
  digit: string;

  constructor(digit: string) {
    this.digit = digit;
    this.root = el('span', 'ar-flap');
    const half = (cls: string): [HTMLElement, HTMLElement] => {
      const h = el('span', `ar-half ${cls}`);
      const face = el('span', 'ar-face', digit);
      h.append(face);
      return [h, face];
    };
    const [top, topFace] = half('ar-top');
    const [bottom, bottomFace] = half('ar-bottom');
    const [leafTop, leafTopFace] = half('ar-top ar-leaf');
    const [leafBottom, leafBottomFace] = half('ar-bottom ar-leaf');
    this.root.append(top, bottom, leafTop, leafBottom);
    this.top = topFace;
    this.bottom = bottomFace;
    this.leafTop = leafTopFace;
    this.leafBottom = leafBottomFace;
    this.root.dataset.digit = digit;
  }

  private settle(): void {
    for (const a of this.running) a.cancel();
    this.running = [];
    this.bottom.textContent = this.digit;
    this.top.textContent = this.digit;
    this.root.classList.remove('ar-flipping');
  }

  set(to: string, animate: boolean, durationMs: number): void {
    if (to === this.digit) return;
    const from = this.digit;
    this.digit = to;
    this.root.dataset.digit = to;
    this.settle();
    const flips = Number(this.root.dataset.flips ?? '0') + 1;
    this.root.dataset.flips = String(flips);
    const leafTop = this.leafTop.parentElement as HTMLElement;
    const leafBottom = this.leafBottom.parentElement as HTMLElement;
    if (!animate || typeof leafTop.animate !== 'function') return;
    // Behind the leaves: the new top, and the old bottom until the new leaf covers it.
    this.top.textContent = to;
    this.bottom.textContent = from;
    this.leafTop.textContent = from;
    this.leafBottom.textContent = to;
    this.root.classList.add('ar-flipping');
    const half = durationMs / 2;
    const fall = leafTop.animate(
      [{ transform: 'rotateX(0deg)' }, { transform: 'rotateX(-90deg)' }],
      { duration: half, easing: 'ease-in', fill: 'forwards' },
    );
    const land = leafBottom.animate(
      [{ transform: 'rotateX(90deg)' }, { transform: 'rotateX(0deg)' }],
      { duration: half, delay: half, easing: 'ease-out', fill: 'both' },
    );
    this.running = [fall, land];
    land.finished.then(
      () => {
        if (this.running.includes(land)) this.settle();
      },
      () => {
        /* cancelled by a newer change */
      },
    );
  }
}

export class SplitFlapBoard {
  private readonly root: HTMLElement;
  private flaps: Flap[] = [];
  private readonly options: BoardOptions;
  value: number;

  constructor(root: HTMLElement, initial: number, minWidth: number, options: BoardOptions = {}) {
    this.root = root;
    this.options = options;
    this.value = Math.max(0, Math.floor(initial));
    const text = pad(this.value, Math.max(1, minWidth));
    root.replaceChildren();
    for (const d of text) this.addFlap(d, false);
    this.markLeadingZeros();
  }

  get width(): number {
    return this.flaps.length;
  }

  get text(): string {
    return this.flaps.map((f) => f.digit).join('');
  }

  private addFlap(digit: string, front: boolean): void {
    const flap = new Flap(digit);
    if (front) {
      this.flaps.unshift(flap);
      this.root.prepend(flap.root);
    } else {
      this.flaps.push(flap);
      this.root.append(flap.root);
    }
  }

  private markLeadingZeros(): void {
    let leading = true;
    this.flaps.forEach((f, i) => {
      leading = leading && f.digit === '0' && i < this.flaps.length - 1;
      f.root.classList.toggle('ar-lead', leading);
    });
  }

  /** Shows `n`; returns the indices of the digits that turned over. */
  set(n: number): number[] {
    const value = Math.max(0, Math.floor(n));
    const text = pad(value, this.flaps.length);
    while (this.flaps.length < text.length) this.addFlap('0', true);
    const animate = !(this.options.reducedMotion?.() ?? false);
    const duration = this.options.durationMs ?? FLIP_MS;
    const changed: number[] = [];
    [...text].forEach((d, i) => {
      const flap = this.flaps[i];
      if (flap.digit !== d) {
        flap.set(d, animate, duration);
        changed.push(i);
      }
    });
    this.value = value;
    this.markLeadingZeros();
    return changed;
  }
}
