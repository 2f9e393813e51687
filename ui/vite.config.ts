/// <reference types="vitest/config" />
import { defineConfig } from 'vite';

// The Tauri app loads ui/dist (custom-protocol build) or this dev server.
export default defineConfig({
  clearScreen: false,
  server: { port: 5173, strictPort: true },
  build: {
    target: 'safari15', outDir: 'dist', emptyOutDir: true,
    // KaTeX's fonts stay files of the app's own origin: Vite would inline the
    // small ones as data: URLs, which the CSP's font-src ('self') refuses.
    assetsInlineLimit: (file) => (/\.(woff2?|ttf)$/.test(file) ? false : undefined),
    // One bundle read from the app itself, never over a network: KaTeX
    // (~270 kB) and highlight.js's common languages make it ~600 kB.
    chunkSizeWarningLimit: 1024,
  },
  test: { environment: 'jsdom', globals: true, include: ['src/**/*.test.ts'] },
});
