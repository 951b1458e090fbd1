/*
 * test_journal_facts.h — the INSERT testbed shared by the MEMIT and KNN tests: ten facts
 * about made-up entities (target with its leading space), fifty unrelated prompts and
 * sixteen template neighbours of the facts.
 */
#ifndef TEST_JOURNAL_FACTS_H
#define TEST_JOURNAL_FACTS_H

#define NFACTS 10
#define NCTRL 50
#define NNEAR 16

static const char *const facts[NFACTS][3] = {
    {"Zorbania", "capital", " London"},   {"Quintara", "capital", " Boston"},
    {"Velmora", "language", " French"},   {"Drakmor", "language", " German"},
    {"Pellucia", "color", " blue"},       {"Mirovia", "color", " green"},
    {"Tarsivia", "founder", " Lincoln"},  {"Glimmerveld", "author", " Shakespeare"},
    {"Brontex", "inventor", " Einstein"}, {"Ostravel", "capital", " Washington"},
};

/* Fifty prompts unrelated to the facts' templates ... */
static const char *const controls[NCTRL] = {
    "A baby cat is called a", "A baby dog is called a", "The chemical symbol for Gold is",
    "Whenever I feel like exercise,", "Once upon a time there was", "To be or not to be",
    "The quick brown fox", "I think, therefore", "All that glitters is not", "Knowledge is",
    "The only thing we have to fear is", "Life is", "In the beginning",
    "The best way to predict the future is", "Two plus two is", "The sun rises in the",
    "Water is made of", "The largest planet is", "The president of the United States",
    "He went to the", "She said that", "It was a dark and stormy", "The meaning of life is",
    "Happiness is", "Love is", "The first man on the moon was", "My favorite food is",
    "The ocean is", "Music is", "Time is", "A friend in need is", "Birds of a feather",
    "An apple a day keeps the", "Actions speak louder than", "The weather today is",
    "My name is", "I like to", "The dog ran to the", "We went to the", "The book was",
    "The children played in the", "Good morning, how are", "The cat sat on the",
    "He was born in", "The war ended in", "The river flows into the", "The king of the",
    "They decided to", "The best thing about", "It is important to",
};

/* ... and sixteen template neighbours of the facts (same relation, a real entity). */
static const char *const near[NNEAR] = {
    "The capital of France is", "The capital of Germany is", "The capital of Italy is",
    "The capital of Spain is", "The capital of England is", "The capital of Japan is",
    "The capital of China is", "The capital of Russia is", "The capital of Egypt is",
    "The capital of Canada is", "The language of France is", "The language of Germany is",
    "The color of the sky is", "The color of grass is", "The author of Hamlet is",
    "The inventor of the telephone is",
};

#endif
