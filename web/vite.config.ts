// One Vite project for every page anteroom serves itself. Each page is an entry in
// `input`; the control room will be a second one. The server reads
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
    rollupOptions: {
      input: {
        waiting: 'src/waiting/main.ts',
      },
    },
  },
});
