// What an empty chat suggests: a few prompts that suit the loaded model
// (and, for a model that sees images, what to do with a picture).
import type { LoadedModel } from './api';

export interface Starters {
  /** One line under the greeting: what this model can do here. */
  hint: string;
  prompts: string[];
}

const TEXT_PROMPTS = [
  'What is the capital of France?',
  'Write a haiku about autumn.',
  'Explain how a rainbow forms, in two sentences.',
  'Give me three ideas for a rainy afternoon.',
];

export function startersFor(model: Pick<LoadedModel, 'name' | 'vision' | 'thinking'>): Starters {
  if (model.vision) {
    return {
      hint: `${model.name} sees images: drop an image anywhere on the window (or paste one) and ask about it.`,
      prompts: ['Describe this picture in one paragraph.', 'What text is in this image?', TEXT_PROMPTS[0]],
    };
  }
  if (model.thinking) {
    return {
      hint: `${model.name} thinks before it answers; its reasoning shows apart from the answer.`,
      prompts: ['A bat and a ball cost $1.10; the bat costs $1 more than the ball. What does the ball cost?', ...TEXT_PROMPTS.slice(0, 2)],
    };
  }
  return { hint: `${model.name} reads text. Ask anything, or start with one of these:`, prompts: TEXT_PROMPTS };
}
