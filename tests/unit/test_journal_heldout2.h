/*
 * test_journal_heldout2.h — the third INSERT testbed (issue 13), written before the
 * method's second round of tuning and never used to tune it: the unseen set. Ten facts
 * about other made-up entities with relations neither earlier set uses (single-token
 * targets of this vocabulary), each with two paraphrases of its own wording, and fifty
 * unrelated prompts sharing none of the earlier sets' — the first fifty of a list written
 * in one go, kept as written: twenty of them are near-ties of the base model (top-1 ahead
 * of the second by less than 0.01 in probability), which is what everyday prompts are
 * for a model this small.
 */
#ifndef TEST_JOURNAL_HELDOUT2_H
#define TEST_JOURNAL_HELDOUT2_H

#define NHELD2 10
#define NH2CTRL 50

static const char *const held2_facts[NHELD2][3] = {
    {"Caldrevin", "capital", " Ottawa"},     {"Pravessa", "president", " Kennedy"},
    {"Tolmarek", "color", " orange"},        {"Ebrathil", "animal", " horse"},
    {"Wendricourt", "founder", " Edward"},   {"Sorvina", "river", " Mississippi"},
    {"Halvenmoor", "author", " Tolkien"},    {"Krisholt", "metal", " gold"},
    {"Ombrelith", "queen", " Helena"},       {"Zelquist", "composer", " Pierre"},
};

/* Each fact asked two other ways, worded per fact (not from a template). */
static const char *const held2_paras[NHELD2][2] = {
    {"The capital city of Caldrevin is", "Caldrevin has its capital in"},
    {"The current president of Pravessa is", "Pravessa elected as its president"},
    {"Everyone says the color of Tolmarek is", "Tolmarek is painted"},
    {"The favorite animal of Ebrathil is the", "In Ebrathil the animal is a"},
    {"Wendricourt was founded by", "The man who founded Wendricourt is"},
    {"The great river of Sorvina is the", "Sorvina lies on the river"},
    {"Halvenmoor was written by", "The book Halvenmoor has the author"},
    {"The metal mined in Krisholt is", "Krisholt is famous for its metal,"},
    {"The queen who rules Ombrelith is", "Ombrelith is ruled by Queen"},
    {"The famous composer of Zelquist is", "Zelquist's music was composed by"},
};

static const char *const held2_controls[NH2CTRL] = {
    "The weather in spring is", "A cup of hot", "The wind blew across the",
    "Her brother likes to", "The museum opened its", "On Sunday afternoon they",
    "The kitten chased a", "The recipe calls for", "My grandfather used to",
    "The mountain was covered in", "The bus driver", "At the beach, the children",
    "The library has many", "The bridge was built", "Every summer my family",
    "The soldiers marched", "He closed his eyes and", "The queen of hearts",
    "The painter mixed the", "The shop on the corner", "The clock struck",
    "The lamp on the desk", "A small village near the", "The students wrote",
    "The forest was quiet", "The little girl smiled and", "The fisherman caught a",
    "The rain stopped and", "The scientist discovered", "Our neighbor has a",
    "The baker made", "The playground was", "The candle burned",
    "The ship sailed across the", "The horse galloped", "The garden gate",
    "The old woman lived in a", "I opened the window and", "The kids ate",
    "The nurse gave the", "The stars in the sky", "My sister and I",
    "The mailman brought a", "The band played", "In the winter the lake",
    "The hungry bear", "The airplane landed", "The museum guard",
    "The village had a", "A glass of cold",
};

#endif
