/// <reference types="vitest/config" />
import { defineConfig } from 'vite';

// The Tauri app loads ui/dist (custom-protocol build) or this dev server.
export default defineConfig({
  clearScreen: false,
  server: { port: 5173, strictPort: true },
  build: { target: 'safari15', outDir: 'dist', emptyOutDir: true },
  test: { environment: 'jsdom', globals: true, include: ['src/**/*.test.ts'] },
});
