// A reply with TeX math and code, in the real window under the app's CSP: a
// tiny model never writes such a reply, so the chat comes in through the
// app's own import (a chat.json as Export writes it). KaTeX typesets the
// math with its bundled fonts, its layout styles apply though the CSP allows
// no inline styles, highlight.js colours the code, and the page reports no
// CSP violation.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { byTestId, openApp, shot, startDriver, stopDriver, tempFolder, waitFor } from './harness.mjs';

const dataDir = tempFolder('vlm-e2e-rendering-');
let browser;

const ANSWER = [
  'The roots of $ax^2 + bx + c = 0$ are',
  '',
  '$$',
  'x = \\frac{-b \\pm \\sqrt{b^2 - 4ac}}{2a}',
  '$$',
  '',
  'and Euler wrote \\(e^{i\\pi} + 1 = 0\\). A coffee costs $5 and a book $10.',
  '',
  '\\[ \\sum_{k=1}^{n} k = \\frac{n(n+1)}{2} \\]',
  '',
  'A bad one shows as written: $\\frac{1}$.',
  '',
  '```rust',
  'fn roots(a: f64, b: f64, c: f64) -> Option<(f64, f64)> {',
  '    let d = b * b - 4.0 * a * c; // the discriminant',
  '    if d < 0.0 { return None; }',
  '    Some(((-b + d.sqrt()) / (2.0 * a), (-b - d.sqrt()) / (2.0 * a)))',
  '}',
  '```',
  '',
  '```kotlin',
  'fun main() { val greeting: String = "hi"; println(greeting) }',
  '```',
].join('\n');

function chatFile() {
  const folder = tempFolder('vlm-e2e-chatfile-');
  const t = Date.now();
  const message = (id, parent, role, content) => ({
    id, parent_id: parent, role, content, status: 'complete', created_at: t, updated_at: t,
    ...(role === 'assistant' ? { model: 'imported' } : {}),
  });
  writeFileSync(join(folder, 'chat.json'), JSON.stringify({
    format: 'vlm-chat', version: 1, title: 'Math and code', created_at: t, updated_at: t, shown: 2,
    messages: [message(1, null, 'user', 'Solve a quadratic.'), message(2, 1, 'assistant', ANSWER)],
  }));
  return join(folder, 'chat.json');
}

describe('a reply with math and code', () => {
  before(async () => {
    await startDriver({ VLM_DATA_DIR: dataDir });
    browser = await openApp();
  });

  after(async () => {
    await browser?.deleteSession().catch(() => {});
    stopDriver();
    setTimeout(() => process.exit(process.exitCode ?? 0), 3000).unref();
  });

  it('typesets the math with KaTeX and highlights the code, under the CSP', async () => {
    await (await byTestId(browser, 'nav-chat')).waitForClickable({ timeout: 30_000 });
    const chat = await browser.execute((path) => window.__TAURI_INTERNALS__.invoke('import_chat', { path }), chatFile());
    // the page starts again, listing the imported chat; every CSP refusal
    // from then on is counted
    await browser.refresh();
    await (await byTestId(browser, 'nav-chat')).waitForClickable({ timeout: 30_000 });
    await browser.execute(() => {
      window.__cspViolations = [];
      document.addEventListener('securitypolicyviolation', (e) => window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));
    });
    await waitFor(browser, 'the imported chat to open', () => browser.execute((id) => {
      const open = document.querySelector(`[data-testid="chat-item"][data-chat-id="${id}"] .chat-open`);
      open?.click();
      return !!document.querySelector('[data-testid="msg-assistant"] .katex');
    }, chat.id), 30_000);
    // the fonts are files of the app's origin: wait for them to load
    await browser.execute(() => document.fonts.ready.then(() => true));

    const seen = await browser.execute(() => {
      const reply = document.querySelector('[data-testid="msg-assistant"]');
      const strut = reply.querySelector('.katex-html .strut');
      const fracLine = reply.querySelector('.frac-line');
      return {
        tex: [...reply.querySelectorAll('annotation[encoding="application/x-tex"]')].map((a) => a.textContent),
        display: reply.querySelectorAll('.katex-display').length,
        errors: [...reply.querySelectorAll('.math-error')].map((e) => e.textContent),
        text: reply.textContent,
        // KaTeX's own fonts, loaded from the bundle
        mainFont: document.fonts.check('16px KaTeX_Main') && [...document.fonts].some((f) => f.family.includes('KaTeX_Main') && f.status === 'loaded'),
        mathFamily: getComputedStyle(reply.querySelector('.katex')).fontFamily,
        // layout styles set through the CSSOM: a strut has its height, a fraction bar its thickness
        strutHeight: parseFloat(getComputedStyle(strut).height),
        fracLine: parseFloat(getComputedStyle(fracLine).borderBottomWidth),
        leftStyleAttrs: reply.querySelectorAll('[data-math-style]').length,
        highlighted: [...reply.querySelectorAll('.code-block')].map((b) => ({
          lang: b.querySelector('.code-lang').textContent,
          tokens: b.querySelectorAll('code [class^="hljs-"]').length,
          keywordColor: getComputedStyle(b.querySelector('.hljs-keyword')).color,
          plainColor: getComputedStyle(b.querySelector('code')).color,
        })),
        violations: window.__cspViolations,
      };
    });
    await shot(browser, 'answer-rendering-01-math-and-code');

    assert.deepEqual(seen.tex, [
      'ax^2 + bx + c = 0', 'x = \\frac{-b \\pm \\sqrt{b^2 - 4ac}}{2a}', 'e^{i\\pi} + 1 = 0', '\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}',
    ]);
    assert.equal(seen.display, 2);
    assert.deepEqual(seen.errors, ['$\\frac{1}$']);
    assert.match(seen.text, /A coffee costs \$5 and a book \$10\./);
    assert.ok(seen.mainFont, 'KaTeX_Main loaded');
    assert.match(seen.mathFamily, /KaTeX_Main/);
    assert.ok(seen.strutHeight > 0, `strut height ${seen.strutHeight}`);
    assert.ok(seen.fracLine > 0, `fraction bar ${seen.fracLine}`);
    assert.equal(seen.leftStyleAttrs, 0);
    assert.deepEqual(seen.highlighted.map((h) => h.lang), ['rust', 'kotlin']);
    for (const h of seen.highlighted) {
      assert.ok(h.tokens > 3, `${h.lang}: ${h.tokens} highlighted tokens`);
      assert.notEqual(h.keywordColor, h.plainColor, `${h.lang} keywords are coloured`);
    }
    assert.deepEqual(seen.violations, []);
  });
});
