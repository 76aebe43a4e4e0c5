/* What runpath_outer.c opens from the folder its RUNPATH names. */
int sibling_answer(void) { return 42; }
