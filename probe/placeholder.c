/* placeholder: replaced as probe/ is built */
typedef int np_probe_placeholder_t;
