// Reads the JSON lines of loadtest/challenge-bench.sh and prints the markdown tables of
// docs/challenge.md and BENCHMARKS.md.
import { readFileSync } from 'node:fs';

const rows = readFileSync(process.argv[2], 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
const key = (r) => `${r.function}|${r.params}`;
const f = (x) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
const rate = (x) => (x >= 1e6 ? `${(x / 1e6).toFixed(2)} M/s` : x >= 1e3 ? `${(x / 1e3).toFixed(1)} k/s` : `${x.toFixed(0)} /s`);

console.log('| function | params | difficulty (bits) | browser worker p50 / p95 ms | browser main p50 / p95 ms | browser main 4x throttled p50 / p95 ms | native 2 threads p50 / p95 ms | hashes/s worker / native | native ÷ browser (hashes/s) |');
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
const solves = rows.filter((r) => r.side === 'native' || r.side === 'browser');
const groups = [...new Set(solves.map((r) => `${key(r)}|${r.difficulty}`))];
for (const g of groups) {
  const of = solves.filter((r) => `${key(r)}|${r.difficulty}` === g);
  const w = of.find((r) => r.side === 'browser' && r.where === 'worker' && r.throttle === 1);
  const m1 = of.find((r) => r.side === 'browser' && r.where === 'main' && r.throttle === 1);
  const m4 = of.find((r) => r.side === 'browser' && r.where === 'main' && r.throttle === 4);
  const n = of.find((r) => r.side === 'native');
  const pp = (r) => (r ? `${f(r.p50_ms)} / ${f(r.p95_ms)}` : '—');
  const [fn, params, d] = g.split('|');
  console.log(`| ${fn} | ${params || '—'} | ${d} | ${pp(w)} | ${pp(m1)} | ${pp(m4)} | ${pp(n)} | ${w ? rate(w.hashes_per_s) : '—'} / ${n ? rate(n.hashes_per_s) : '—'} | ${w && n ? `${(n.hashes_per_s / w.hashes_per_s).toFixed(1)}x` : '—'} |`);
}
console.log('\n| function | params | server verify per solution (1 thread) |');
console.log('| --- | --- | --- |');
for (const r of rows.filter((r) => r.side === 'verify' || r.side === 'module')) {
  const what = r.side === 'module' ? `${r.params}: the whole check (issue: ${f(r.issue_us)} µs)` : r.params || 'the hash and the zero-bit check';
  console.log(`| ${r.function} | ${what} | ${f(r.verify_us)} µs |`);
}
