/* placeholder: replaced as compare/ is built */
typedef int np_compare_placeholder_t;
