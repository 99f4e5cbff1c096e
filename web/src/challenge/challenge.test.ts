// The challenge's two scripts are plain files the server serves as they are (no bundler:
// they must exist in a build without the front-end), so they are loaded here from their
// text, the way the browser runs them, with a hook that hands over their functions.
import { readFileSync } from 'node:fs';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import vectors from './vectors.json';

// The served files live in web/challenge/; the tests and vectors here.
const here = (name: string) => new URL(name.startsWith('../') ? name : `../../challenge/${name}`, import.meta.url);
const text = (name: string) => readFileSync(here(name), 'utf8');

interface Hasher {
  init(): void;
  update(data: Uint8Array): void;
  digest(kind: 'binary'): Uint8Array;
}
interface HashWasm {
  createSHA256(): Promise<Hasher>;
}

/** hash-wasm as the worker gets it: the vendored UMD file, run as a script. */
function loadHashWasm(): HashWasm {
  const exports = {} as HashWasm;
  new Function('exports', 'module', 'define', text('hash-wasm-sha256.umd.min.js'))(
    exports,
    {},
    undefined,
  );
  return exports;
}

interface WorkerApi {
  leadingZeroBits(h: Uint8Array): number;
  decodeNonce(s: string): Uint8Array;
  writeCounter(view: DataView, offset: number, c: number): void;
  solve(
    h: Hasher,
    nonce: Uint8Array,
    bits: number,
    onProgress: (n: number) => void,
    now: () => number,
  ): number;
}

type Root = Record<string, unknown> & {
  onmessage?: (e: { data: unknown }) => void;
  postMessage?: (m: unknown) => void;
};

function runWorker(root: Root, hashwasm?: HashWasm) {
  if (hashwasm) root.hashwasm = hashwasm;
  new Function('self', text('challenge-worker.js'))(root);
}

function workerApi(): WorkerApi {
  let api: WorkerApi | undefined;
  runWorker({ __anteroomChallengeWorkerTest: (a: WorkerApi) => (api = a) }, loadHashWasm());
  return api!;
}

interface PageApi {
  run(el: Element, env: Env): void;
  percent(hashes: number, bits: number): number;
  fields(c: string): { nonce: string; bits: number } | null;
  samePath(p: string | null): string;
  MAX_RESTARTS: number;
}
interface Env {
  worker(): FakeWorker;
  fetch(url: string, init: RequestInit): Promise<Response>;
  replace(url: string): void;
  now(): number;
  wait(ms: number, fn: () => void): void;
  exclusive(name: string, fn: () => Promise<unknown>): Promise<unknown>;
  reducedMotion: boolean;
}

function pageApi(): PageApi {
  let api: PageApi | undefined;
  new Function('window', text('challenge.js'))({
    __anteroomChallengeTest: (a: PageApi) => (api = a),
  });
  return api!;
}

describe('hash-wasm, bundled into the worker', () => {
  it('is the pinned npm package’s own file, and a dependency of the build', () => {
    const pkg = JSON.parse(text('../../package.json'));
    const installed = JSON.parse(text('../../node_modules/hash-wasm/package.json'));
    expect(pkg.dependencies['hash-wasm']).toMatch(/^\d+\.\d+\.\d+$/);
    expect(pkg.dependencies['hash-wasm']).toBe(installed.version);
    expect(text('hash-wasm-sha256.umd.min.js')).toBe(
      text('../../node_modules/hash-wasm/dist/sha256.umd.min.js'),
    );
  });
});

describe('the worker', () => {
  const w = workerApi();

  it('counts leading zero bits and decodes the nonce', () => {
    expect(w.leadingZeroBits(new Uint8Array([0, 0x0f, 0xff]))).toBe(12);
    expect(w.leadingZeroBits(new Uint8Array([0x80]))).toBe(0);
    expect(w.leadingZeroBits(new Uint8Array([0, 0]))).toBe(16);
    const nonce = w.decodeNonce('_-8');
    expect([...nonce]).toEqual([0xff, 0xef]);
    expect(w.decodeNonce(vectors[0].nonce)).toHaveLength(16);
  });

  it('writes the counter as 8 bytes big-endian, beyond 32 bits too', () => {
    const view = new DataView(new ArrayBuffer(10));
    w.writeCounter(view, 2, 2 ** 32 + 5);
    expect([...new Uint8Array(view.buffer)]).toEqual([0, 0, 0, 0, 0, 1, 0, 0, 0, 5]);
    w.writeCounter(view, 2, 2 ** 40 + 0x01020304);
    expect([...new Uint8Array(view.buffer, 2)]).toEqual([0, 0, 1, 0, 1, 2, 3, 4]);
  });

  it('finds the server’s solution for every vector, with one hasher', async () => {
    const h = await loadHashWasm().createSHA256();
    for (const v of vectors) {
      const nonce = w.decodeNonce(v.nonce);
      expect(w.solve(h, nonce, v.bits, () => {}, () => 0)).toBe(v.solution);
      h.init();
      const input = new Uint8Array(24);
      input.set(nonce);
      w.writeCounter(new DataView(input.buffer), 16, v.solution);
      h.update(input);
      expect(Buffer.from(h.digest('binary')).toString('hex')).toBe(v.hash);
    }
  });

  it('reports progress about every 100 ms of its clock, counting hashes', async () => {
    const h = await loadHashWasm().createSHA256();
    const v = vectors.find((x) => x.solution > 100_000)!;
    let clock = 0;
    const seen: number[] = [];
    const found = w.solve(h, w.decodeNonce(v.nonce), v.bits, (n) => seen.push(n), () => (clock += 50));
    expect(found).toBe(v.solution);
    // The clock moves 50 per look, a look every 1024 hashes: a report every other look.
    expect(seen.length).toBe(Math.floor((v.solution + 1) / 2048));
    seen.forEach((n, i) => expect(n).toBe((i + 1) * 2048));
  });

  it('loads hash-wasm from next to itself when it is not there yet', () => {
    const imported: string[] = [];
    runWorker({ importScripts: (name: string) => imported.push(name) });
    expect(imported).toEqual(['hash-wasm-sha256.umd.min.js']);
  });

  it('answers {progress}… then {solution}, creating the hasher once for all challenges', async () => {
    const hw = loadHashWasm();
    const create = vi.spyOn(hw, 'createSHA256');
    const messages: Record<string, number>[] = [];
    const root: Root = { postMessage: (m) => messages.push(m as Record<string, number>) };
    vi.stubGlobal('performance', { now: () => 0 });
    runWorker(root, hw);
    const [a, b] = vectors.filter((v) => v.bits >= 12);
    for (const v of [a, b]) {
      const before = messages.length;
      root.onmessage!({ data: { nonce: v.nonce, bits: v.bits } });
      await vi.waitFor(() => expect(messages.length).toBeGreaterThan(before));
      expect(messages.at(-1)).toEqual({ solution: v.solution, hashes: v.solution + 1 });
    }
    expect(create).toHaveBeenCalledTimes(1);
    vi.unstubAllGlobals();
  });
});

class FakeWorker {
  posted: { nonce: string; bits: number }[] = [];
  terminated = false;
  onmessage: ((e: { data: unknown }) => void) | null = null;
  onerror: (() => void) | null = null;
  postMessage(m: { nonce: string; bits: number }) {
    this.posted.push(m);
  }
  terminate() {
    this.terminated = true;
  }
  say(data: unknown) {
    this.onmessage!({ data });
  }
}

const STRINGS = {
  checking: 'Checking…',
  progress: 'Checking… {n} %',
  joining: 'Joining…',
  retrying: 'Again…',
  failed: 'Could not check.',
  reload: 'Try again',
};

const C1 = 'c1.main.1733300000.17.AAAAAAAAAAAAAAAAAAAAAA.tagtagtagtagtagt.mac';
const C2 = 'c1.main.1733300100.18.BBBBBBBBBBBBBBBBBBBBBB.tagtagtagtagtagt.mac';

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'Content-Type': 'application/json' },
  });
}

describe('the page', () => {
  const p = pageApi();
  let worker: FakeWorker;
  let replaced: string[];
  let posts: { url: string; body: Record<string, unknown> }[];
  let answers: (Response | Error)[];
  let clock: number;
  let locks: string[];

  function page(strings: object | null = STRINGS) {
    const attr = strings ? ` data-strings='${JSON.stringify(strings)}'` : '';
    document.body.innerHTML = `<div id="anteroom-challenge" data-challenge="${C1}" data-bits="17"
      data-answer="/__anteroom/challenge" data-return="/shop?item=1"${attr}>
      <p id="anteroom-challenge-status" role="status" aria-live="polite">Checking…</p>
      <progress id="anteroom-challenge-progress" max="100"></progress></div>`;
    return document.getElementById('anteroom-challenge')!;
  }
  const status = () => document.getElementById('anteroom-challenge-status')!;
  const bar = () => document.getElementById('anteroom-challenge-progress') as HTMLProgressElement;

  function env(reducedMotion = false): Env {
    return {
      worker: () => worker,
      fetch: async (url, init) => {
        posts.push({ url, body: JSON.parse(String(init.body)) });
        const next = answers.shift()!;
        if (next instanceof Error) throw next;
        return next;
      },
      replace: (url) => replaced.push(url),
      now: () => clock,
      wait: (_ms, fn) => fn(),
      exclusive: (name, fn) => {
        locks.push(name);
        return fn();
      },
      reducedMotion,
    };
  }

  beforeEach(() => {
    worker = new FakeWorker();
    replaced = [];
    posts = [];
    answers = [];
    clock = 1000;
    locks = [];
  });

  it('reads the challenge, and progress rises steadily below 100 %', () => {
    expect(p.fields(C1)).toEqual({ nonce: 'AAAAAAAAAAAAAAAAAAAAAA', bits: 17 });
    expect(p.fields('c1.a.b.c.1733300000.17.NONCE.tag.mac')).toEqual({ nonce: 'NONCE', bits: 17 });
    expect(p.fields('nope')).toBeNull();
    expect(p.fields('c1.main.1.99.n.t.m')).toBeNull();
    expect(p.percent(0, 17)).toBe(0);
    expect(p.percent(2 ** 17, 17)).toBe(63);
    expect(p.percent(2 ** 24, 17)).toBe(99);
    let last = 0;
    for (let n = 0; n < 2 ** 20; n += 4096) {
      const pct = p.percent(n, 17);
      expect(pct).toBeGreaterThanOrEqual(last);
      last = pct;
    }
    expect(p.samePath('/a?b=1')).toBe('/a?b=1');
    for (const bad of ['//evil.example/', 'https://evil.example/', '/\\evil', '', null]) {
      expect(p.samePath(bad)).toBe('/');
    }
  });

  it('solves, shows progress in the status line and on the bar, posts, and goes back', async () => {
    p.run(page(), env());
    expect(worker.posted).toEqual([{ nonce: 'AAAAAAAAAAAAAAAAAAAAAA', bits: 17 }]);
    expect(bar().value).toBe(0);
    expect(status().textContent).toBe('Checking… 0 %');
    worker.say({ progress: 2 ** 16 });
    expect(bar().value).toBe(39);
    expect(status().textContent).toBe('Checking… 20 %');
    worker.say({ progress: 2 ** 16 + 100 });
    expect(status().textContent).toBe('Checking… 20 %');
    answers.push(json(200, { status: 'waiting', position: 3 }));
    clock = 1812.4;
    worker.say({ solution: 123456, hashes: 123457 });
    expect(status().textContent).toBe('Joining…');
    expect(bar().value).toBe(100);
    await vi.waitFor(() => expect(replaced).toEqual(['/shop?item=1']));
    expect(posts).toEqual([
      { url: '/__anteroom/challenge', body: { challenge: C1, solution: 123456, solve_ms: 812 } },
    ]);
    expect(worker.terminated).toBe(true);
    expect(locks).toEqual(['anteroom-challenge:main']);
  });

  it('with reduced motion, the bar is hidden and only the words move', () => {
    p.run(page(), env(true));
    expect(bar().hidden).toBe(true);
    expect(bar().hasAttribute('value')).toBe(false);
    worker.say({ progress: 2 ** 17 });
    expect(bar().hasAttribute('value')).toBe(false);
    expect(status().textContent).toBe('Checking… 60 %');
  });

  it('starts again with the fresh challenge after a refusal, at most three times', async () => {
    p.run(page(), env());
    const refusal = (c: string) =>
      json(403, {
        status: 'challenge_refused',
        reason: 'expired',
        challenge: { challenge: c, bits: 18, answer: '/__anteroom/challenge', expires_in_secs: 300 },
      });
    for (let i = 1; i <= p.MAX_RESTARTS; i++) {
      answers.push(refusal(C2));
      worker.say({ solution: i, hashes: i + 1 });
      await vi.waitFor(() => expect(worker.posted).toHaveLength(i + 1));
      expect(worker.posted[i]).toEqual({ nonce: 'BBBBBBBBBBBBBBBBBBBBBB', bits: 18 });
      expect(status().textContent).toBe('Checking… 0 %');
    }
    expect(posts.map((x) => x.body.challenge)).toEqual([C1, C2, C2]);
    answers.push(refusal(C2));
    worker.say({ solution: 9, hashes: 10 });
    await vi.waitFor(() => expect(status().querySelector('a')).not.toBeNull());
    expect(worker.posted).toHaveLength(p.MAX_RESTARTS + 1);
    expect(status().textContent).toBe('Could not check. Try again');
    expect(status().querySelector('a')!.getAttribute('href')).toBe('/shop?item=1');
    expect(bar().hidden).toBe(true);
    expect(replaced).toEqual([]);
  });

  it('gives up with the reload link on an answer that brings no fresh challenge', async () => {
    p.run(page(), env());
    answers.push(new Response('<h1>Too many requests</h1>', { status: 429 }));
    worker.say({ solution: 5, hashes: 6 });
    await vi.waitFor(() => expect(status().querySelector('a')).not.toBeNull());
    expect(replaced).toEqual([]);
  });

  it('sends the same answer again when the network fails', async () => {
    p.run(page(), env());
    answers.push(new TypeError('network'), json(200, { status: 'admitted' }));
    worker.say({ solution: 5, hashes: 6 });
    await vi.waitFor(() => expect(replaced).toEqual(['/shop?item=1']));
    expect(posts).toHaveLength(2);
    expect(posts[1].body).toEqual(posts[0].body);
  });

  it('says it failed, with the link, when the worker cannot run', () => {
    p.run(page(), env());
    worker.onerror!();
    expect(status().textContent).toBe('Could not check. Try again');
    worker.say({ solution: 1 });
    expect(posts).toEqual([]);
  });

  it('waits out the page’s time lock and takes the no-JavaScript way when the worker cannot run', () => {
    const el = page({ ...STRINGS, slow: 'Slow way: {n} s.' });
    el.setAttribute('data-wait-secs', '20');
    const waits: number[] = [];
    p.run(el, { ...env(), wait: (ms, fn) => (waits.push(ms), fn()) });
    worker.say({ error: 'CompileError: WebAssembly.instantiate() blocked' });
    expect(waits).toEqual([20_000]);
    expect(status().textContent).toBe('Slow way: 20 s.');
    expect(bar().hidden).toBe(true);
    expect(worker.terminated).toBe(true);
    expect(replaced).toEqual([
      `/__anteroom/challenge/wait?c=${encodeURIComponent(C1)}&r=${encodeURIComponent('/shop?item=1')}`,
    ]);
    expect(posts).toEqual([]);
  });

  it('takes the same way when the browser has no Worker at all', () => {
    const el = page();
    el.setAttribute('data-wait-secs', '5');
    p.run(el, {
      ...env(),
      worker: () => {
        throw new ReferenceError('Worker is not defined');
      },
    });
    expect(replaced).toHaveLength(1);
    expect(replaced[0]).toMatch(/^\/__anteroom\/challenge\/wait\?c=c1\.main\./);
  });

  it('shows no English of its own when the page gave it no strings', () => {
    p.run(page(null), env());
    worker.say({ progress: 2 ** 17 });
    expect(status().textContent).toBe('Checking…');
    worker.say({ error: 'no wasm' });
    expect(status().textContent).toBe('Checking…↻');
  });
});
