// The browser side of the proof-of-work measurement (docs/challenge.md), loaded by the page
// and by its Web Worker alike. Same puzzle as loadtest's `challenge-bench`: challenge i has
// the prefix SHA-256("anteroom-bench/<function>/<difficulty>/<i>")[..16]; the solution is
// the smallest counter (u64 big-endian after the prefix) whose hash has `difficulty`
// leading zero bits.
/* global hashwasm */
function leadingZeroBits(h) {
  let n = 0;
  for (let i = 0; i < h.length; i++) {
    if (h[i] === 0) { n += 8; continue; }
    return n + Math.clz32(h[i]) - 24;
  }
  return n;
}

async function benchPrefix(fn, d, i) {
  // Both SHA-256 candidates solve the same challenges (the native solver's `sha256`).
  const name = fn === 'sha256-wasm' ? 'sha256' : fn;
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(`anteroom-bench/${name}/${d}/${i}`));
  return new Uint8Array(digest).slice(0, 16);
}

function makeHash(cfg) {
  switch (cfg.function) {
    case 'sha256':
      return async (input) => new Uint8Array(await crypto.subtle.digest('SHA-256', input));
    case 'sha256-wasm': {
      // hash-wasm's SHA-256, one hasher reused: synchronous, no promise per attempt.
      const h = cfg.sha256Wasm;
      return (input) => { h.init(); h.update(input); return h.digest('binary'); };
    }
    case 'argon2id':
      return (input, salt) => hashwasm.argon2id({
        password: input, salt, parallelism: 1, iterations: cfg.argon2T, memorySize: cfg.argon2M,
        hashLength: 32, outputType: 'binary',
      });
    case 'scrypt':
      return (input, salt) => hashwasm.scrypt({
        password: input, salt, costFactor: 2 ** cfg.scryptLogN, blockSize: 8, parallelism: 1,
        hashLength: 32, outputType: 'binary',
      });
    default:
      throw new Error(`unknown function ${cfg.function}`);
  }
}

async function solveOne(hash, prefix, d) {
  const input = new Uint8Array(24);
  input.set(prefix, 0);
  const view = new DataView(input.buffer);
  for (let c = 0; ; c++) {
    view.setUint32(16, Math.floor(c / 2 ** 32));
    view.setUint32(20, c >>> 0);
    const out = hash(input, prefix);
    if (leadingZeroBits(out instanceof Uint8Array ? out : await out) >= d) return c;
  }
}

/** Solves cfg.count challenges at difficulty d; returns per-challenge ms and counters. */
async function benchRun(cfg, d) {
  if (cfg.function === 'sha256-wasm') cfg = { ...cfg, sha256Wasm: await hashwasm.createSHA256() };
  const hash = makeHash(cfg);
  await hash(new Uint8Array(24), new Uint8Array(16)); // load and compile the WASM first
  const ms = [];
  const counters = [];
  for (let i = 0; i < cfg.count; i++) {
    const prefix = await benchPrefix(cfg.function, d, i);
    const t0 = performance.now();
    counters.push(await solveOne(hash, prefix, d));
    ms.push(performance.now() - t0);
  }
  return { ms, counters };
}

if (typeof WorkerGlobalScope !== 'undefined' && self instanceof WorkerGlobalScope) {
  self.onmessage = async (e) => {
    try {
      self.postMessage(await benchRun(e.data.cfg, e.data.d));
    } catch (err) {
      self.postMessage({ error: String(err) });
    }
  };
}
