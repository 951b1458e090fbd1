/*
 * test_journal_heldout.h — a second INSERT testbed, written after the method was tuned on
 * test_journal_facts.h and never used to tune it (issue 13: the suite's own controls kept
 * 49/50 while unseen prompts kept fewer). Ten facts about other made-up entities, partly
 * with relations the suite does not use, single-token targets of this vocabulary; fifty
 * unrelated prompts that share none of the suite's; paraphrase templates used for both sets.
 */
#ifndef TEST_JOURNAL_HELDOUT_H
#define TEST_JOURNAL_HELDOUT_H

#define NHELD 10
#define NHCTRL 50
#define NPARA 2

static const char *const held_facts[NHELD][3] = {
    {"Varenthos", "capital", " Victoria"}, {"Lumeria", "language", " English"},
    {"Korvath", "color", " yellow"},       {"Belnor", "king", " George"},
    {"Sylvaran", "founder", " Franklin"},  {"Draventh", "mayor", " Johnson"},
    {"Quellmark", "flag", " red"},         {"Nimbrel", "leader", " Charles"},
    {"Ardenfall", "inventor", " Henry"},   {"Ostrevia", "author", " Mary"},
};

static const char *const held_controls[NHCTRL] = {
    "The sky is", "My mother told me", "The train arrived at", "After dinner we",
    "The teacher asked the", "In the morning I", "The city was", "She opened the door and",
    "The game ended with", "He picked up the", "The first day of school", "There was a little",
    "The old man", "On the table there was a", "The store sells", "The movie was",
    "The car stopped at the", "Every night the", "The flowers in the garden",
    "The boy wanted to", "I am going to", "The house is", "We need to", "The water was",
    "The moon is", "Yesterday I saw a", "The doctor said", "The girl was",
    "The people of the town", "The letter was", "The story begins with", "The road to the",
    "A long time ago", "The price of", "The team won the", "The bird flew",
    "His favorite color is", "The school is", "The baby was", "The end of the",
    "The computer is", "The phone rang and", "The bread is", "In the summer we",
    "The snow fell on the", "The farmer had a", "The two friends", "The music was",
    "The capital of Australia is", "The language of Spain is",
};

/* The fact asked another way: "%1$s" is the entity, "%2$s" the relation. */
static const char *const para_templates[NPARA] = {
    "%1$s's %2$s is",
    "I know that the %2$s of %1$s is",
};

#endif
