/* placeholder: replaced as configcheck/ is built */
typedef int np_configcheck_placeholder_t;
