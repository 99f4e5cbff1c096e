// One Vite project for every page anteroom serves itself. Each page is an entry in
// `input`: the waiting page's board and the control room (Preact, JSX compiled by Vite's
// own transform with `jsxImportSource: "preact"` from tsconfig.json). The server reads
// dist/.vite/manifest.json (embedded into the binary) to find the fingerprinted names, and
// serves them under /__anteroom/static/ with a one-year immutable cache.
import { defineConfig } from 'vite';

export default defineConfig({
  base: '/__anteroom/static/',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    manifest: true,
    assetsDir: '',
    target: 'es2020',
    modulePreload: false,
    // The pages load only their entry's own file and CSS (src/http/assets.rs ignores the
    // manifest's `imports`), so the entries must share no chunk: keep shared helpers out
    // (the control room declares class fields with `declare` for that reason).
    rollupOptions: {
      input: {
        waiting: 'src/waiting/main.ts',
        control: 'src/control/main.tsx',
      },
    },
  },
});
