// The proof of work at the door, solved off the page's thread, with hash-wasm's SHA-256
// (WebAssembly, inline in `hash-wasm-sha256.umd.min.js` next to this file, which defines
// `hashwasm`); WebCrypto would cost a promise per hash, ten times slower
// (docs/challenge.md).
//
// The puzzle: the smallest counter c (from 0) such that SHA-256(nonce || c as 8 bytes
// big-endian) starts with at least `bits` zero bits, where nonce is the base64url field of
// the challenge. The page sends {nonce, bits}; the worker answers {progress: hashes} about
// every PROGRESS_MS while it works, then {solution, hashes}, or {error} if it cannot.
(function (root) {
  'use strict';

  var PROGRESS_MS = 100;
  var TWO_32 = 4294967296;

  /** Leading zero bits of a hash (a byte array). */
  function leadingZeroBits(h) {
    var n = 0;
    for (var i = 0; i < h.length; i++) {
      if (h[i] === 0) {
        n += 8;
        continue;
      }
      return n + Math.clz32(h[i]) - 24;
    }
    return n;
  }

  /** The bytes of a base64url string (no padding). */
  function decodeNonce(text) {
    var b64 = text.replace(/-/g, '+').replace(/_/g, '/');
    while (b64.length % 4) b64 += '=';
    var bin = atob(b64);
    var out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  /** Writes `c` (below 2^53) as 8 bytes big-endian at `offset` of `view`. */
  function writeCounter(view, offset, c) {
    view.setUint32(offset, Math.floor(c / TWO_32));
    view.setUint32(offset + 4, c >>> 0);
  }

  /**
   * The smallest counter whose hash has `bits` leading zero bits, with one `hasher`
   * (hash-wasm's, reused: init/update/digest) for every attempt; `onProgress(hashes)` is
   * called about every PROGRESS_MS of `now()`.
   */
  function solve(hasher, nonce, bits, onProgress, now) {
    var input = new Uint8Array(nonce.length + 8);
    input.set(nonce, 0);
    var view = new DataView(input.buffer);
    var last = now();
    for (var c = 0; c < Number.MAX_SAFE_INTEGER; c++) {
      writeCounter(view, nonce.length, c);
      hasher.init();
      hasher.update(input);
      if (leadingZeroBits(hasher.digest('binary')) >= bits) return c;
      if ((c & 1023) === 1023) {
        var t = now();
        if (t - last >= PROGRESS_MS) {
          last = t;
          onProgress(c + 1);
        }
      }
    }
    throw new Error('no solution');
  }

  var api = {
    leadingZeroBits: leadingZeroBits,
    decodeNonce: decodeNonce,
    writeCounter: writeCounter,
    solve: solve,
  };
  if (typeof root.__anteroomChallengeWorkerTest === 'function') {
    root.__anteroomChallengeWorkerTest(api);
    return;
  }

  if (typeof root.hashwasm === 'undefined') root.importScripts('hash-wasm-sha256.umd.min.js');

  // One hasher for the worker's life: a second challenge (after a refusal) reuses it.
  var hasher = null;
  root.onmessage = function (event) {
    var job = event.data || {};
    (hasher ? Promise.resolve(hasher) : root.hashwasm.createSHA256())
      .then(function (h) {
        hasher = h;
        var solution = solve(
          h,
          decodeNonce(String(job.nonce)),
          Number(job.bits),
          function (hashes) {
            root.postMessage({ progress: hashes });
          },
          function () {
            return performance.now();
          },
        );
        root.postMessage({ solution: solution, hashes: solution + 1 });
      })
      .catch(function (err) {
        root.postMessage({ error: String(err) });
      });
  };
})(self);
