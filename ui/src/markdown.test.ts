import { describe, expect, it } from 'vitest';
import { renderMarkdown, setMarkdown } from './markdown';

describe('renderMarkdown', () => {
  it('renders Markdown with highlighted code blocks and a copy button', () => {
    const html = renderMarkdown('Some **bold** text\n\n```rust\nfn main() {}\n```');
    expect(html).toContain('<strong>bold</strong>');
    expect(html).toContain('class="copy-code"');
    expect(html).toContain('hljs-keyword');
    expect(html).toContain('>rust<');
  });

  it('never lets model output run script or load things', () => {
    const html = renderMarkdown('<img src=x onerror="alert(1)"> <script>alert(2)</script> [x](javascript:alert(3))');
    const div = document.createElement('div');
    div.innerHTML = html;
    expect(div.querySelector('img, script')).toBeNull();
    expect(div.querySelector('[onerror]')).toBeNull();
    for (const a of div.querySelectorAll('a')) expect(a.getAttribute('href') ?? '').not.toMatch(/^javascript:/i);
  });

  it('shows an unknown language as plain escaped text', () => {
    const html = renderMarkdown('```brainfart\n<b>not bold</b>\n```');
    expect(html).toContain('&lt;b&gt;not bold&lt;/b&gt;');
  });

  it('wires the copy button to the block text', async () => {
    const written: string[] = [];
    Object.defineProperty(navigator, 'clipboard', { value: { writeText: async (t: string) => { written.push(t); } }, configurable: true });
    const el = document.createElement('div');
    setMarkdown(el, '```\nprint("hi")\n```');
    el.querySelector<HTMLButtonElement>('button.copy-code')!.click();
    await Promise.resolve();
    expect(written).toEqual(['print("hi")']);
  });
});
